-- renew.lua: extend this holder's lease, only if it is still held and has
-- not lapsed; never re-create it. A permit handed over and not yet claimed
-- is claimed: only its waiter knows its id.
-- KEYS: see lib.lua. ARGV (RenewArgs in args.go): id, the permit id;
-- ttl, the lease, ms; fence, the holder's restart fence, ms.
-- Reply: renewed, 1 when extended, 0 when the permit is gone (lost).
local a = args()
local id, ttl, fence = a.id, num(a.ttl, MINTTL, MAXTTL), num(a.fence or '0', 0, MAXTTL)
if not (id and ttl and fence) then
  return redis.error_reply('ERR semrun: renew.lua: bad arguments')
end
local moved = rebase()

local score = claimed(id) or num(redis.call('ZSCORE', holdersKey, id), 0, MAXINT)
if not score or score <= now then
  -- Leases pushed back need keys that live as long.
  if moved > 0 then keepalive(0) end
  return reply{renewed = 0}
end
redis.call('ZADD', holdersKey, 'XX', now + ttl, id)
remember(fence, ttl, ttl)
keepalive(ttl)
return reply{renewed = 1}
