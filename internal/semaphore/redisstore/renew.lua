-- renew.lua: extend this holder's lease, only if it is still held and has
-- not lapsed; never re-create it.
-- KEYS: see lib.lua. ARGV (renewArgs in scripts.go): id, the permit id;
-- ttl, the lease, ms.
-- Reply: renewed, 1 when extended, 0 when the permit is gone (lost).
local a = args()
local id, ttl = a.id, tonumber(a.ttl)
local moved = rebase()

local score = redis.call('ZSCORE', holdersKey, id)
if not score or tonumber(score) <= now then
  -- Leases pushed back need keys that live as long.
  if moved > 0 then keepalive(0) end
  return reply{renewed = 0}
end
redis.call('ZADD', holdersKey, 'XX', now + ttl, id)
keepalive(ttl)
return reply{renewed = 1}
