-- release.lua: give this caller's permit back, or its place in line.
-- Releasing twice is harmless. The waiters whose turn it now is get their
-- permits.
-- KEYS: see lib.lua. ARGV (releaseArgs in scripts.go): id, the permit id;
-- wake, the prefix of the key's wake lists.
-- Reply: released, 1 when the permit was held or the caller waited, 0
-- otherwise.
-- The wake list goes first: while its slot migrates, Redis refuses a key
-- the node no longer has, and refused before any write, a retry finds
-- everything as it was, the seat to hand over included.
local a = args()
redis.call('DEL', wakekey(a.wake, a.id))
local moved = rebase()
local removed = redis.call('ZREM', holdersKey, a.id) + redis.call('ZREM', queueKey, a.id)
redis.call('HDEL', infoKey, a.id)
redis.call('HDEL', waitersKey, a.id)
if removed > 0 then
  sweep()
  local longest = handoff(a.wake, used())
  if longest > 0 then keepalive(longest) end
end
if moved > 0 then keepalive(0) end
return reply{released = math.min(removed, 1)}
