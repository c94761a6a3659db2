-- renew: extend this holder's lease, only if it is still held and has not lapsed.
-- KEYS[1] holders, KEYS[2] info, KEYS[3] token (see acquire.lua)
-- ARGV[1] permit id, ARGV[2] lease ms
-- Returns 1 when extended, 0 when the permit is gone (lost); never re-creates it.
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, ttl = ARGV[1], tonumber(ARGV[2])

local score = redis.call('ZSCORE', KEYS[1], id)
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, id)

local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local ms = math.max(ttl, tonumber(last[2]) - now) + 1000
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('PEXPIRE', KEYS[2], ms)
redis.call('PEXPIRE', KEYS[3], ms)
return 1
