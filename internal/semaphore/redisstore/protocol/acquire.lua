-- acquire.lua: sweep lapsed holders and waiters, handing their permits to the
-- waiters whose turn that makes, then grant a permit when it is the
-- caller's turn: nobody waits and its weight fits under N, or it was
-- handed one. Otherwise, unless it will not wait, the caller gets, or
-- keeps, its place in line, with a lease of its own.
-- KEYS: see lib.lua. ARGV (AcquireArgs in args.go):
--   id       the permit id (the keys name it by its member)
--   permits  the capacity N
--   ttl      the lease, ms
--   meta     what status shows of the caller
--   weight   the permits it takes
--   wait     the waiter lease in a short line, ms; 0: the caller does not
--            wait. A longer line stretches it (PERWAITER a waiter, at
--            most MAXWAIT), so that keeping places costs Redis the same
--            however long the line: the renewals of places on one key stay
--            under about 25 a second.
--   wake     the prefix of the key's wake lists
--   fence    the restart fence, ms (0: none): while the server has been up
--            for less, nobody is granted a permit, the caller included
--   line     the longest line the key takes: a caller who would make it
--            longer is refused (full)
--   bound    ms after its grant past which the permit is never renewed;
--            0: none
--   cool     its min hold, ms after its grant; 0: none (see terms in
--            lib.lua)
--   waited   ms since the caller's call began: a grant's wait, and where
--            a waiter's wait is counted from (its record's since)
--   fencewait  ms of a restart fence a caller that does not wait waits
--            out before it asks again: a longer fence is its busy answer
--   quiet    1: no event is logged (counted still; see event in lib.lua)
--   prio     its priority (0: everyone's), and
--   age      its age, ms (0: none; the key's stored one wins): see place
--            in lib.lua
--   super    1: it supersedes: joining the line it sends away the waiter
--            that asked so before it ('#super' in the waiters' hash), who
--            finds "s <meta>" in its wake list, and meta in its mark (the
--            wake prefix and ":s" named as its wake list); and it is sent
--            away so
--   was      1: the caller was in this line before: one that supersedes
--            looks whether it was sent away meanwhile
-- Reply (AcquireReply in args.go):
--   granted   1 when the caller holds a permit
--   token     its fencing token (0 when not granted)
--   held      the permits taken
--   previous  the capacity the previous caller asked
--   lapse     ms until the earliest lease lapses (or, while fenced, until the fence ends)
--   position  the caller's place in line (1 first; 0 not in line)
--   waiting   how many wait
--   now       the server's clock, ms
--   left      ms left of the caller's lease (0 when not granted)
--   fenced    ms left of the restart fence
--   moved     ms the holders' leases were pushed back (negative: ms the clock went back; see rebase)
--   full      1 when the line was full and the caller is not in it
--   bad       the records this call dropped, which were not records
--   handed    the wake lists of the waiters this call handed a permit to (see handoff)
--   wait      the caller's waiter lease, ms (0 when not in line)
--   since     the server's clock when the permit was granted (0 when not)
--   stored    the capacity an operator stored, which the caller is admitted
--             against (0: none)
--   paused    1 when an operator paused the key (no grants); reason, and
--   pausedfor ms until the pause ends (0: until resumed)
--   over      1 when the caller's weight exceeds the stored capacity: it
--             is neither granted nor in line
--   recent    the key's recent hold, ms, for a caller in line (0 otherwise,
--             or when none was counted)
--   fresh     1 when the key's counters were renewed: the caller lists
--             the key in the index (see count in lib.lua)
--   age       the age the line counts the caller's place with, ms (0: none)
--   superseded  the record of the newer caller that sent it away (it is
--             not in line)
--   slots     the slots granted, "0,3" (none on a key of more than
--             MAXSLOTS permits; see takeSlots in lib.lua), and
--   names     their names, "a,d", when an operator named them
-- Events: a grant, by this call or the hand-over it makes (once: a
-- repeat of the call writes none); busy, for a caller that would not wait
-- and gets nothing, or one refused a place in a full line.
-- Running it twice with the same permit id (a client retry, or a waiter
-- that asks after it was handed its permit) grants once and returns the
-- same token.
local a = args()
local id, meta, wake = a.id and member(a.id), a.meta or '', a.wake
local n, ttl = num(a.permits, 1, MAXPERMITS), num(a.ttl, MINTTL, MAXTTL)
local weight, wlease = num(a.weight, 1, MAXPERMITS), num(a.wait, 0, MAXTTL)
local fence, line = num(a.fence, 0, MAXTTL), num(a.line, 1, MAXLINE)
local asked, coolFor = num(a.bound or '0', 0, MAXBOUND), num(a.cool or '0', 0, MAXCOOL)
local waited, fenceWait = num(a.waited or '0', 0, MAXINT), num(a.fencewait or '0', 0, MAXINT)
local prio, age = num(a.prio or '0', -MAXPRIO, MAXPRIO), num(a.age or '0', 0, MAXAGE)
if not (id and wake and n and ttl and weight and wlease and fence and line and asked and coolFor and waited and fenceWait
  and prio and age) then
  return redis.error_reply('ERR semrun: acquire.lua: bad arguments')
end
age = policy().age or age

local prev = field('#cap', 1, MAXPERMITS) or n
if wlease > 0 then
  wlease = math.min(math.max(wlease, waiting() * PERWAITER), MAXWAIT)
end
remember(fence, ttl, math.max(ttl, wlease))

-- refused records the busy answer of this caller, for why ('' when every
-- permit is held).
local function refused(why)
  event({e = 'busy', m = metaOf(meta), n = n, w = weight, why = why})
end

-- record keeps the caller's place in line with a fresh waiter lease.
local function record(since)
  redis.call('ZADD', leasesKey, now + wlease, id)
  redis.call('HSET', waitersKey, id, waiterRecord{expiry = now + wlease, permits = n, weight = weight, since = since, ttl = ttl,
    prio = prio, age = age, meta = meta})
end

local moved = rebase()
local longest = 0
local changed = sweep(wake)
local busy = used()
local inline = redis.call('ZSCORE', queueKey, id)
if inline and wlease > 0 then
  local w = readWaiter(redis.call('HGET', waitersKey, id))
  record(w and w.since or now)
end
-- A waiter that asks again runs the hand-over too: its turn may have come
-- while no script could hand it over (the restart fence held it back). So
-- does a caller that finds permits free and a line: its head may be a
-- record that is not one, or a waiter whose lease lapsed.
if changed or inline or (busy < n and waiting() > 0) then
  local given, err
  longest, given, err = handoff(wake, busy)
  if err then return redis.error_reply(err) end
  busy = busy + given
end

local function answer(granted, token, left, position, lapse, full, since, over, slots, superseded)
  local p = policy()
  local recent = 0
  if position > 0 then
    -- For the waiter's estimate of its wait: read only when it waits.
    local ok, v = pcall(redis.call, 'HGET', statsKey, 'recent')
    recent = ok and num(v, 0, MAXINT) or 0
  end
  return reply{granted = granted, token = token, held = busy, previous = prev, lapse = lapse,
    position = position, waiting = waiting(), now = now, left = left,
    fenced = fenceLeft(), moved = moved, full = full or 0, bad = bad, handed = handed,
    wait = position > 0 and wlease or 0, since = since or 0, stored = p.cap or 0,
    paused = p.paused and 1 or 0, reason = p.paused and p.paused.reason or '',
    pausedfor = p.paused and p.paused.left or 0, over = over or 0, recent = recent, fresh = fresh,
    slots = slots or '', names = slotNames(slots) or '', age = age, superseded = superseded or ''}
end

if a.super == '1' and a.was == '1' and not inline then
  -- Sent away while it was not looking: its mark says by whom.
  local mark = wakekey(wake .. ':s', id)
  local by = redis.call('GET', mark)
  if by then
    redis.call('DEL', mark, wakekey(wake, id))
    keepalive(longest)
    return answer(0, 0, 0, 0, wakeIn(), 0, 0, 0, nil, by)
  end
end

local expiry = num(redis.call('ZSCORE', holdersKey, id), 0, MAXINT)
local rec = expiry and redis.call('HGET', infoKey, id)
local mine = readHolder(rec)
local hard, minEnd, cooling
if expiry and mine then
  hard, minEnd, cooling = terms(id)
end
if cooling then
  -- Given back already, and cooling: a late repeat of this call holds
  -- nothing.
  keepalive(longest)
  return answer(0, 0, 0, 0, wakeIn())
elseif expiry and mine then
  -- Handed over: the caller asks, so it takes its turn here.
  redis.call('DEL', wakekey(wake, id))
  expiry = claimed(id) or expiry
  hard = recordTerms(id, asked, coolFor, hard, minEnd, mine.since)
  if hard and expiry > hard then
    expiry = hard
    redis.call('ZADD', holdersKey, 'XX', expiry, id)
  end
  redis.call('HSET', infoKey, '#cap', n)
  keepalive(longest)
  return answer(1, mine.token, expiry - now, 0, earliest(), 0, mine.since, 0, mine.slots)
elseif expiry then
  -- Its record is not one: no token to give back. The caller has not
  -- started its command yet, so it may have a permit anew.
  dropped('holder', rec or '')
  removeHolder(id)
  busy = used()
end

if weight > capacity(n) then
  -- Refused, it is no caller of the key: the capacity it asked is not the
  -- latest caller's.
  if inline then dropWaiter(id) end
  keepalive(longest)
  return answer(0, 0, 0, 0, wakeIn(), 0, 0, 1)
end
redis.call('HSET', infoKey, '#cap', n)
if not inline and waiting() == 0 and busy + weight <= capacity(n) and fenced() == 0
  and not policy().paused then
  local left = ttl
  if asked > 0 then left = math.min(ttl, asked) end
  local token, err, slots = grant(id, n, weight, ttl, now + left, meta, asked > 0 and now + asked or nil,
    coolFor > 0 and now + coolFor or nil)
  if not token then return redis.error_reply(err) end
  busy = busy + weight
  keepalive(math.max(ttl, longest))
  event({e = 'grant', id = publicID(id), m = metaOf(meta), n = n, w = weight, t = token, wait = waited, s = slots},
    'w', waited)
  return answer(1, token, left, 0, earliest(), 0, now, 0, slots)
end

if wlease == 0 then
  keepalive(longest)
  -- The answer the caller hears (acquire.go's ask): a fence it waits out
  -- is none yet.
  local f = fenceLeft()
  if f > 0 then
    if f > fenceWait then refused('restart fence') end
  elseif policy().paused then
    refused(policy().paused.reason ~= '' and policy().paused.reason or 'paused')
  elseif busy + weight > capacity(n) then
    refused('')
  else
    refused('others wait in line')
  end
  return answer(0, 0, 0, 0, wakeIn())
end

if not inline then
  if waiting() >= line then
    keepalive(longest)
    refused('line full')
    return answer(0, 0, 0, 0, wakeIn(), 1)
  end
  -- Its wait counts from when its call began.
  local since = math.max(now - waited, 0)
  if a.super == '1' then
    -- The waiter that superseded before it leaves, told by whom; unless
    -- it came later (this caller's place lapsed while it was stopped, and
    -- it asks again): then this one, the older, goes.
    local prev = redis.call('HGET', waitersKey, '#super')
    local w = prev and prev ~= id and redis.call('ZSCORE', queueKey, prev) and readWaiter(redis.call('HGET', waitersKey, prev))
    if w and w.since > since then
      keepalive(longest)
      event({e = 'supersede', m = metaOf(meta), n = n, w = weight, wait = waited, by = metaOf(w.meta)})
      return answer(0, 0, 0, 0, wakeIn(), 0, 0, 0, nil, metaOf(w.meta))
    elseif w then
      dropWaiter(prev)
      -- Told in its wake list, if it waits on it, and by a mark of its
      -- own (a string beside the lists), if it asks again first: both
      -- last as long as its place could have.
      local k, life = wakekey(wake, prev), math.max(WAKELIFE, w.expiry - now + WAKELIFE)
      redis.call('RPUSH', k, 's ' .. metaOf(meta))
      redis.call('PEXPIRE', k, life)
      redis.call('SET', wakekey(wake .. ':s', prev), metaOf(meta), 'PX', life)
      event({e = 'supersede', m = metaOf(w.meta), n = w.permits, w = w.weight, wait = math.max(now - w.since, 0),
        by = metaOf(meta)})
    end
  end
  local last = redis.call('HGET', waitersKey, '#seq')
  local seq = num(last or '0', 0, MAXINT - 1)
  if not seq then
    return redis.error_reply('COUNTERLIMIT the line\'s ticket counter ' .. string.format('%q', string.sub(last, 1, 40)) .. ' cannot be raised')
  end
  redis.call('HSET', waitersKey, '#seq', seq + 1)
  redis.call('ZADD', queueKey, place(since, prio, age, seq + 1), id)
  inLine = nil
  record(since)
  -- A permit handed over before, which lapsed unused, left its turn there.
  redis.call('DEL', wakekey(wake, id))
  if a.super == '1' then redis.call('HSET', waitersKey, '#super', id) end
end
keepalive(math.max(ttl, wlease, longest))
return answer(0, 0, 0, redis.call('ZRANK', queueKey, id) + 1, wakeIn())
