-- release.lua: give this caller's permit back, or its place in line.
-- Releasing twice is harmless. The waiters whose turn it now is get their
-- permits.
-- A permit given back, after its command ran, before its min hold
-- passed stays taken until then, as cooling (see terms and cool in
-- lib.lua), with the exit status of its command for status.
-- KEYS: see lib.lua. ARGV (ReleaseArgs in args.go): id, the permit id;
-- wake, the prefix of the key's wake lists; cool, the min hold, ms, when
-- a command ran (0: none, or no command ran: give it back at once); exit,
-- the command's exit status (-1: unknown); timeout, 1 when a waiter's wait
-- ended at its deadline (else it left); quiet (see event in lib.lua).
-- Reply: released, 1 when the permit was held or the caller waited, 0
-- otherwise; cooling, ms the permit stays taken (0: none); bad, the
-- records this call dropped, which were not records; handed, the wake
-- lists of the waiters it handed a permit to (see handoff); fresh (see
-- acquire.lua's reply).
-- Events: the release, once (a permit cooling was given back already), or
-- the waiter's timeout or leave.
-- The wake list goes first: while its slot migrates, Redis refuses a key
-- the node no longer has, and refused before any write, a retry finds
-- everything as it was, the permit to hand over included.
local a = args()
local coolFor, exit = num(a.cool or '0', 0, MAXCOOL), num(a.exit or '-1', -1, 255)
if not (a.id and a.wake and coolFor and exit) then
  return redis.error_reply('ERR semrun: release.lua: bad arguments')
end
local id = member(a.id)
redis.call('DEL', wakekey(a.wake, id))
local moved = rebase()
local removed, cooling = 0, 0
if redis.call('ZSCORE', holdersKey, id) then
  local ends = 0
  local h, cooled
  if coolFor > 0 then
    -- As recorded at its grant, or from the grant's time when the first
    -- call of a permit handed over never came.
    local _, minEnd
    _, minEnd, cooled = terms(id)
    h = readHolder(redis.call('HGET', infoKey, id))
    if not minEnd then
      minEnd = h and h.since + coolFor
    end
    ends = minEnd or 0
  end
  if ends > now then
    cooling = ends - now
    cool(id, ends, exit)
    keepalive(cooling)
  else
    h, cooled = removeHolder(id)
    removed = 1
  end
  if not cooled then released(id, h, exit, cooling) end
end
if redis.call('ZSCORE', queueKey, id) then
  local w = readWaiter(redis.call('HGET', waitersKey, id))
  dropWaiter(id)
  removed = 1
  if w then
    local waited = math.max(now - w.since, 0)
    event({e = a.timeout == '1' and 'timeout' or 'leave', m = metaOf(w.meta), n = w.permits, w = w.weight,
      wait = waited})
  end
end
if removed > 0 then
  sweep(a.wake)
  -- A token that cannot be raised stops the grants, not this release:
  -- the waiters hear of it when they ask.
  local longest = handoff(a.wake, used())
  if longest > 0 then keepalive(longest) end
end
if moved > 0 then keepalive(0) end
if cooling > 0 then removed = 1 end
return reply{released = removed, cooling = cooling, bad = bad, handed = handed, fresh = fresh}
