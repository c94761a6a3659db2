-- renew: extend this holder's lease, only if it is still held and has not lapsed.
-- KEYS: see lib.lua
-- ARGV[1] permit id, ARGV[2] lease ms
-- Returns 1 when extended, 0 when the permit is gone (lost); never re-creates it.
local id, ttl = ARGV[1], tonumber(ARGV[2])
local moved = rebase()

local score = redis.call('ZSCORE', KEYS[1], id)
if not score or tonumber(score) <= now then
  -- Leases pushed back need keys that live as long.
  if moved > 0 then keepalive(0) end
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, id)
keepalive(ttl)
return 1
