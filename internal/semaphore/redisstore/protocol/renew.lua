-- renew.lua: extend this holder's lease, only if it is still held and has
-- not lapsed; never re-create it. A permit handed over and not yet claimed
-- is claimed: only its waiter knows its id. A bounded permit is never
-- renewed past its bound (see terms in lib.lua), nor from then on: its
-- holder ran past its max runtime. A permit cooling is given back. A
-- permit an operator revoked is renewed no more: its holder stops its
-- command, and lets go or lapses.
-- KEYS: see lib.lua. ARGV (RenewArgs in args.go): id, the permit id;
-- ttl, the lease, ms; fence, the holder's restart fence, ms; bound and
-- cool, the terms its holder asked for (ms after the grant, 0: none),
-- recorded unless they are already.
-- Reply: renewed, 1 when extended, 0 when the permit is gone (lost) or
-- at its bound; left, ms left of the lease (0 when not renewed); hard,
-- ms until its bound (0: none); revoked, 1 when an operator revoked it,
-- with reason.
local a = args()
local id, ttl, fence = a.id and member(a.id), num(a.ttl, MINTTL, MAXTTL), num(a.fence or '0', 0, MAXTTL)
local asked, coolFor = num(a.bound or '0', 0, MAXBOUND), num(a.cool or '0', 0, MAXCOOL)
if not (id and ttl and fence and asked and coolFor) then
  return redis.error_reply('ERR semrun: renew.lua: bad arguments')
end
local moved = rebase()

-- Revoked, even by force (gone already): said so.
local revoked = revokedMark(id)
if revoked then
  if moved > 0 then keepalive(0) end
  return reply{renewed = 0, left = 0, hard = 0, revoked = 1, reason = string.sub(string.match(revoked, '^%d+ (.*)$') or '', 1, MAXREASON)}
end
local hard, minEnd, cooling, claim = terms(id)
local score = not cooling and ((claim[1] and claimed(id, claim)) or num(redis.call('ZSCORE', holdersKey, id), 0, MAXINT))
if not score or score <= now or (hard and hard <= now) then
  -- Leases pushed back need keys that live as long.
  if moved > 0 then keepalive(0) end
  return reply{renewed = 0, left = 0, hard = 0, revoked = 0, reason = ''}
end
hard = recordTerms(id, asked, coolFor, hard, minEnd)
local expiry = now + ttl
if hard then expiry = math.min(expiry, hard) end
redis.call('ZADD', holdersKey, 'XX', expiry, id)
remember(fence, ttl, ttl)
keepalive(ttl)
return reply{renewed = 1, left = expiry - now, hard = hard and hard - now or 0, revoked = 0, reason = ''}
