-- acquire: sweep lapsed permits, then grant one if fewer than N are held.
-- KEYS[1] holders: sorted set, permit id -> lease expiry (ms on the server's clock)
-- KEYS[2] info:    hash, permit id -> "<permits> <token> <granted ms> <meta>";
--                  field "#cap" -> the capacity the latest caller asked for
-- KEYS[3] token:   string, the last fencing token handed out
-- ARGV[1] permit id, ARGV[2] capacity N, ARGV[3] lease ms, ARGV[4] meta (opaque to this script)
-- Returns {granted 0|1, token, held, previous capacity asked, ms until the earliest lease lapses}.
-- Running it twice with the same permit id (a client retry) grants once and returns the same token.
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, n, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #lapsed > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #lapsed, 500 do
    redis.call('HDEL', KEYS[2], unpack(lapsed, i, math.min(i + 499, #lapsed)))
  end
end

local prev = tonumber(redis.call('HGET', KEYS[2], '#cap') or n)
local held = redis.call('ZCARD', KEYS[1])

local function earliest()
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return tonumber(first[2]) - now
end

-- The keys live as long as the longest lease, so an abandoned semaphore vanishes.
local function keepalive()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local ms = ttl
  if #last > 0 then ms = math.max(ms, tonumber(last[2]) - now) end
  ms = ms + 1000
  redis.call('PEXPIRE', KEYS[1], ms)
  redis.call('PEXPIRE', KEYS[2], ms)
  redis.call('PEXPIRE', KEYS[3], ms)
end

local mine = redis.call('HGET', KEYS[2], id)
if mine and redis.call('ZSCORE', KEYS[1], id) then
  local token = tonumber(string.match(mine, '^%d+ (%d+) '))
  return {1, token, held, prev, earliest()}
end

if held >= n then
  redis.call('HSET', KEYS[2], '#cap', n)
  return {0, 0, held, prev, earliest()}
end

-- Seeded from the server's clock in microseconds, so tokens keep rising even
-- after the keys expired or the store lost its data.
local token = redis.call('INCR', KEYS[3])
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
if token < floor then
  redis.call('SET', KEYS[3], floor)
  token = floor
end

redis.call('ZADD', KEYS[1], now + ttl, id)
redis.call('HSET', KEYS[2], id, string.format('%d %d %d ', n, token, now) .. ARGV[4], '#cap', n)
keepalive()
return {1, token, held + 1, prev, earliest()}
