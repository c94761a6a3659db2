-- many.lua: a caller of several keys asks for a permit of each, in one
-- call: it is granted all of them, or none and, unless it will not wait,
-- it keeps a place in every key's line, holding nothing. Each key is
-- swept and handed over as acquire.lua does it; the caller is granted
-- once it would be on every key at once: nobody waits before it (or it
-- is first in line), its weight fits, no fence or pause holds the key.
--
-- A caller of several keys in line is marked ('#many <id>' in each
-- waiters' hash): a hand-over (handoff in lib.lua) stops at it, and asks
-- it to look again when it would fit there, since only a call that sees
-- all its keys may grant it. It joins every line at once, with one ticket
-- past the last of every line it joins (the largest '#seq', plus one), so
-- that every line orders any two callers alike: the first of them all in
-- line is first in each of its lines, and no two callers wait for each
-- other. With a priority or an age, its place is counted from that
-- ticket, its own priority and its own age (not a key's stored one), the
-- same in every line (place in lib.lua), which keeps that so. A place
-- lost in one line (its lease lapsed) is given up in all, and taken anew
-- in all.
--
-- KEYS: lib.lua's six for each key, one key after another. ARGV (ManyArgs
-- in args.go): acquire.lua's id, ttl, wait, fence, line, bound, cool,
-- waited, fencewait, quiet, prio and age, for every key; and the i-th key's permits,
-- weight, meta and wake, named permits<i>, weight<i>, meta<i>, wake<i>.
-- Reply: one reply a key, in their order, each as acquire.lua's, and fits,
-- 1 when that key would grant the caller now.
local a = args()
local id = a.id and member(a.id)
local ttl, wait0 = num(a.ttl, MINTTL, MAXTTL), num(a.wait, 0, MAXTTL)
local fenceArg, line = num(a.fence, 0, MAXTTL), num(a.line, 1, MAXLINE)
local asked, coolFor = num(a.bound or '0', 0, MAXBOUND), num(a.cool or '0', 0, MAXCOOL)
local waited, fenceWait = num(a.waited or '0', 0, MAXINT), num(a.fencewait or '0', 0, MAXINT)
local prio, age = num(a.prio or '0', -MAXPRIO, MAXPRIO), num(a.age or '0', 0, MAXAGE)
local count = #KEYS / 6
if not (id and ttl and wait0 and fenceArg and line and asked and coolFor and waited and fenceWait and prio and age)
  or count < 2 or count > MAXKEYS or count ~= math.floor(count) then
  return redis.error_reply('ERR semrun: many.lua: bad arguments')
end
manyCaller = id

-- bind makes lib.lua's functions work on the i-th key: its keys, and what
-- a script reads of a key once or gathers for its reply, kept for each
-- key between its turns.
local saved, current = {}, nil
local function bind(i)
  if current then
    saved[current] = {inLine = inLine, policyRead = policyRead, fenceRead = fenceRead, fenceChecked = fenceChecked,
      fenceAsked = fenceAsked, coolUntil = coolUntil, fresh = fresh, newLog = newLog, handed = handed, bad = bad}
  end
  current = i
  holdersKey, infoKey, tokenKey = KEYS[6 * i - 5], KEYS[6 * i - 4], KEYS[6 * i - 3]
  queueKey, waitersKey, leasesKey = KEYS[6 * i - 2], KEYS[6 * i - 1], KEYS[6 * i]
  local base = string.sub(infoKey, 1, -5)
  policyKey, eventsKey, statsKey = base .. 'policy', base .. 'events', base .. 'stats'
  local s = saved[i] or {fenceChecked = false, fenceAsked = 0, coolUntil = 0, fresh = 0, newLog = false, handed = {}, bad = {}}
  inLine, policyRead, fenceRead, fenceChecked = s.inLine, s.policyRead, s.fenceRead, s.fenceChecked
  fenceAsked, coolUntil, fresh, newLog, handed, bad = s.fenceAsked, s.coolUntil, s.fresh, s.newLog, s.handed, s.bad
end

-- record keeps the caller's place in k's line with a fresh waiter lease.
local function record(k, since)
  redis.call('ZADD', leasesKey, now + k.wlease, id)
  redis.call('HSET', waitersKey, id, waiterRecord{expiry = now + k.wlease, permits = k.n, weight = k.weight, since = since, ttl = ttl,
    prio = prio, age = age, meta = k.meta})
end

-- First, each key as acquire.lua finds it, without granting anything.
local keys = {}
for i = 1, count do
  bind(i)
  local k = {wake = a['wake' .. i], meta = a['meta' .. i] or '', longest = 0}
  k.n, k.weight = num(a['permits' .. i], 1, MAXPERMITS), num(a['weight' .. i], 1, MAXPERMITS)
  if not (k.wake and k.n and k.weight) then
    return redis.error_reply('ERR semrun: many.lua: bad arguments')
  end
  k.prev = field('#cap', 1, MAXPERMITS) or k.n
  k.wlease = wait0
  if k.wlease > 0 then
    k.wlease = math.min(math.max(k.wlease, waiting() * PERWAITER), MAXWAIT)
  end
  remember(fenceArg, ttl, math.max(ttl, k.wlease))
  k.moved = rebase()
  local changed = sweep(k.wake)
  k.busy = used()
  k.inline = redis.call('ZSCORE', queueKey, id) -- false when not in line
  if k.inline and k.wlease > 0 then
    local w = readWaiter(redis.call('HGET', waitersKey, id))
    k.since = w and w.since or now
    record(k, k.since)
  end
  if changed or k.inline or (k.busy < k.n and waiting() > 0) then
    local given, err
    k.longest, given, err = handoff(k.wake, k.busy)
    if err then return redis.error_reply(err) end
    k.busy = k.busy + given
  end
  -- Held already: this call repeated (a reply lost), or a permit handed
  -- over by a semrun that knows no many.lua.
  local expiry = num(redis.call('ZSCORE', holdersKey, id), 0, MAXINT)
  local rec = expiry and redis.call('HGET', infoKey, id)
  local mine = readHolder(rec)
  if expiry and mine then
    local hard, minEnd, cooling = terms(id)
    if cooling then
      k.cooling = true
    else
      k.mine, k.expiry, k.hard, k.minEnd = mine, expiry, hard, minEnd
    end
  elseif expiry then
    dropped('holder', rec or '')
    removeHolder(id)
    k.busy = used()
  end
  k.over = k.weight > capacity(k.n)
  local first
  if k.inline then
    first = redis.call('ZRANK', queueKey, id) == 0
  else
    first = waiting() == 0
  end
  k.fits = k.mine ~= nil or (not k.over and first and k.busy + k.weight <= capacity(k.n)
    and fenced() == 0 and not policy().paused)
  keys[i] = k
end

local function answer(k, granted, token, left, position, lapse, full, since, over, slots)
  local p = policy()
  local recent = 0
  if position > 0 then
    local ok, v = pcall(redis.call, 'HGET', statsKey, 'recent')
    recent = ok and num(v, 0, MAXINT) or 0
  end
  return reply{granted = granted, token = token, held = k.busy, previous = k.prev, lapse = lapse,
    position = position, waiting = waiting(), now = now, left = left,
    fenced = fenceLeft(), moved = k.moved, full = full or 0, bad = bad, handed = handed,
    wait = position > 0 and k.wlease or 0, since = since or 0, stored = p.cap or 0,
    paused = p.paused and 1 or 0, reason = p.paused and p.paused.reason or '',
    pausedfor = p.paused and p.paused.left or 0, over = over or 0, recent = recent, fresh = fresh,
    fits = k.fits and 1 or 0, slots = slots or '', names = slotNames(slots) or '', age = age}
end

local all, cooling, over = true, false, false
for i = 1, count do
  all = all and keys[i].fits
  cooling = cooling or keys[i].cooling
  over = over or keys[i].over
end
local out = {}

if cooling or over then
  -- Given back already, and cooling: a late repeat of a call that was
  -- granted holds nothing. A weight over a stored capacity could never be
  -- granted: the caller leaves every line and hears why.
  for i = 1, count do
    bind(i)
    local k = keys[i]
    if over and k.inline then dropWaiter(id) end
    keepalive(k.longest)
    out[i] = answer(k, 0, 0, 0, 0, wakeIn(), 0, 0, k.over and 1 or 0)
  end
  return out
end

if all then
  for i = 1, count do
    bind(i)
    local k = keys[i]
    redis.call('DEL', wakekey(k.wake, id))
    if k.mine then
      if k.inline then dropWaiter(id) end
      local expiry = claimed(id) or k.expiry
      local hard = recordTerms(id, asked, coolFor, k.hard, k.minEnd, k.mine.since)
      if hard and expiry > hard then
        expiry = hard
        redis.call('ZADD', holdersKey, 'XX', expiry, id)
      end
      redis.call('HSET', infoKey, '#cap', k.n)
      keepalive(k.longest)
      out[i] = answer(k, 1, k.mine.token, expiry - now, 0, earliest(), 0, k.mine.since, 0, k.mine.slots)
    else
      if k.inline then dropWaiter(id) end
      redis.call('HSET', infoKey, '#cap', k.n)
      local left = ttl
      if asked > 0 then left = math.min(ttl, asked) end
      local token, err, slots = grant(id, k.n, k.weight, ttl, now + left, k.meta, asked > 0 and now + asked or nil,
        coolFor > 0 and now + coolFor or nil)
      if not token then return redis.error_reply(err) end
      k.busy = k.busy + k.weight
      keepalive(math.max(ttl, k.longest))
      local w = k.since and math.max(now - k.since, 0) or waited
      event({e = 'grant', id = publicID(id), m = metaOf(k.meta), n = k.n, w = k.weight, t = token, wait = w, s = slots},
        'w', w)
      out[i] = answer(k, 1, token, left, 0, earliest(), 0, now, 0, slots)
    end
  end
  return out
end

if wait0 == 0 then
  -- Busy, as acquire.lua says it, on each key that would not grant.
  for i = 1, count do
    bind(i)
    local k = keys[i]
    redis.call('HSET', infoKey, '#cap', k.n)
    keepalive(k.longest)
    if not k.fits then
      local f = fenceLeft()
      if f > 0 then
        if f > fenceWait then event({e = 'busy', m = metaOf(k.meta), n = k.n, w = k.weight, why = 'restart fence'}) end
      elseif policy().paused then
        local why = policy().paused.reason ~= '' and policy().paused.reason or 'paused'
        event({e = 'busy', m = metaOf(k.meta), n = k.n, w = k.weight, why = why})
      elseif k.busy + k.weight > capacity(k.n) then
        event({e = 'busy', m = metaOf(k.meta), n = k.n, w = k.weight, why = ''})
      else
        event({e = 'busy', m = metaOf(k.meta), n = k.n, w = k.weight, why = 'others wait in line'})
      end
    end
    out[i] = answer(k, 0, 0, 0, 0, wakeIn())
  end
  return out
end

-- In every line, or none.
local inAll, full = true, nil
for i = 1, count do
  inAll = (inAll and keys[i].inline and true) or false
end
if not inAll then
  for i = 1, count do
    bind(i)
    if not keys[i].inline and waiting() >= line then full = full or i end
  end
  local ticket = 0
  for i = 1, count do
    bind(i)
    local k = keys[i]
    if k.inline then
      dropWaiter(id)
      k.inline = nil
    end
    if not full then
      local last = redis.call('HGET', waitersKey, '#seq')
      local seq = num(last or '0', 0, MAXINT - 1)
      if not seq then
        return redis.error_reply('COUNTERLIMIT the line\'s ticket counter ' .. string.format('%q', string.sub(last, 1, 40)) .. ' cannot be raised')
      end
      ticket = math.max(ticket, seq + 1)
    end
  end
  if full then
    for i = 1, count do
      bind(i)
      local k = keys[i]
      keepalive(k.longest)
      if i == full then event({e = 'busy', m = metaOf(k.meta), n = k.n, w = k.weight, why = 'line full'}) end
      out[i] = answer(k, 0, 0, 0, 0, wakeIn(), i == full and 1 or 0)
    end
    return out
  end
  -- Its wait counts from when its call began.
  local since = math.max(now - waited, 0)
  for i = 1, count do
    bind(i)
    local k = keys[i]
    redis.call('HSET', waitersKey, '#seq', ticket, '#many ' .. id, 1)
    redis.call('ZADD', queueKey, place(since, prio, age, ticket), id)
    inLine = nil
    record(k, since)
    redis.call('DEL', wakekey(k.wake, id))
  end
end
for i = 1, count do
  bind(i)
  local k = keys[i]
  redis.call('HSET', infoKey, '#cap', k.n)
  keepalive(math.max(ttl, k.wlease, k.longest))
  out[i] = answer(k, 0, 0, 0, redis.call('ZRANK', queueKey, id) + 1, wakeIn())
end
return out
