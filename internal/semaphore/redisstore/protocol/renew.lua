-- renew.lua: extend this holder's lease, only if it is still held and has
-- not lapsed; never re-create it. A permit handed over and not yet claimed
-- is claimed: only its waiter knows its id.
-- A bounded permit is never renewed past its bound (see bound in lib.lua),
-- and not at all from then on: its holder ran past its max runtime.
-- KEYS: see lib.lua. ARGV (RenewArgs in args.go): id, the permit id;
-- ttl, the lease, ms; fence, the holder's restart fence, ms; bound, ms
-- after the grant past which the permit is never renewed (0: none).
-- Reply: renewed, 1 when extended, 0 when the permit is gone (lost) or
-- at its bound; left, ms left of the lease (0 when not renewed).
local a = args()
local id, ttl, fence = a.id, num(a.ttl, MINTTL, MAXTTL), num(a.fence or '0', 0, MAXTTL)
local asked = num(a.bound or '0', 0, MAXBOUND)
if not (id and ttl and fence and asked) then
  return redis.error_reply('ERR semrun: renew.lua: bad arguments')
end
local moved = rebase()

local score = claimed(id) or num(redis.call('ZSCORE', holdersKey, id), 0, MAXINT)
if not score or score <= now then
  -- Leases pushed back need keys that live as long.
  if moved > 0 then keepalive(0) end
  return reply{renewed = 0, left = 0}
end
local expiry = now + ttl
local hard = bound(id, asked)
if hard then
  if hard <= now then
    if moved > 0 then keepalive(0) end
    return reply{renewed = 0, left = 0}
  end
  expiry = math.min(expiry, hard)
end
redis.call('ZADD', holdersKey, 'XX', expiry, id)
remember(fence, ttl, ttl)
keepalive(ttl)
return reply{renewed = 1, left = expiry - now}
