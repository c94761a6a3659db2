-- release.lua: give this caller's permit back, or its place in line.
-- Releasing twice is harmless. The waiters whose turn it now is get their
-- permits.
-- KEYS: see lib.lua. ARGV (ReleaseArgs in args.go): id, the permit id;
-- wake, the prefix of the key's wake lists.
-- Reply: released, 1 when the permit was held or the caller waited, 0
-- otherwise; bad, the records this call dropped, which were not records;
-- handed, the wake lists of the waiters it handed a seat to (see handoff).
-- The wake list goes first: while its slot migrates, Redis refuses a key
-- the node no longer has, and refused before any write, a retry finds
-- everything as it was, the seat to hand over included.
local a = args()
if not (a.id and a.wake) then
  return redis.error_reply('ERR semrun: release.lua: bad arguments')
end
redis.call('DEL', wakekey(a.wake, a.id))
local moved = rebase()
local removed = 0
if redis.call('ZSCORE', holdersKey, a.id) then
  removeHolder(a.id)
  removed = 1
end
if redis.call('ZSCORE', queueKey, a.id) then
  dropWaiter(a.id)
  removed = 1
end
if removed > 0 then
  sweep(a.wake)
  -- A token that cannot be raised stops the grants, not this release:
  -- the waiters hear of it when they ask.
  local longest = handoff(a.wake, used())
  if longest > 0 then keepalive(longest) end
end
if moved > 0 then keepalive(0) end
return reply{released = removed, bad = bad, handed = handed}
