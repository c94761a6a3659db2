-- release: give this caller's permit back, or its place in line. Releasing
-- twice is harmless. The waiters whose turn it now is get their permits.
-- KEYS: see lib.lua
-- ARGV[1] permit id, ARGV[2] wake list prefix
-- Returns 1 when the permit was held or the caller waited, 0 otherwise.
-- The wake list goes first: while its slot migrates, Redis refuses a key
-- the node no longer has, and refused before any write, a retry finds
-- everything as it was, the seat to hand over included.
redis.call('DEL', wakekey(ARGV[2], ARGV[1]))
local moved = rebase()
local removed = redis.call('ZREM', KEYS[1], ARGV[1]) + redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
if removed > 0 then
  sweep()
  local longest = handoff(ARGV[2], used(), '')
  if longest > 0 then keepalive(longest) end
end
if moved > 0 then keepalive(0) end
return math.min(removed, 1)
