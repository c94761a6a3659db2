-- lib.lua: the start of every script; the store sends it and a script's
-- own file as one (script.go). It holds what the scripts share: their
-- keys, arguments and replies, the records, the clock, the sweep and the
-- hand-over.
--
-- A permit goes by its member in every key: the SHA-1 of its id (member),
-- never the id itself, which only its holder knows. Below, "id" in a
-- key's description is that member.
--
-- KEYS, the same for every script, in this order (keys.go names them):
--   holders: sorted set, permit id -> lease expiry (ms on the server's clock)
--   info:    hash, permit id -> holder record; "#cap" -> the capacity the
--            latest caller asked; "#used" -> the permits the holders take;
--            "#claim <id>" -> the full lease of a permit handed over and
--            not yet claimed (see handoff); "#bound <id>", "#min <id>"
--            -> that permit's terms (see terms); "#cool <id>" -> the exit
--            status of a permit that is cooling (-1: unknown; see
--            cool); "#clock", "#ttl" (rebase);
--            "#fencefrom", "#fencelen", "#fenceuntil", "#replid" (fenced);
--            "#slot <n>" -> the id of the holder of slot n, "#slotlow"
--            -> where the next grant looks for free slots from (takeSlots)
--   token:   string, the last fencing token handed out
--   queue:   sorted set, waiter id -> ticket: the order of arrival
--   waiters: hash, waiter id -> waiter record; "#seq" -> the last ticket
--   leases:  sorted set, waiter id -> waiter lease expiry, so that lapsed
--            waiters are found in expiry order
-- and, not among KEYS, beside them (named as info is, with their own
-- ending; see keys.go's Keys.All): what happened to the key, which an
-- ACL user may be refused (on an upgrade, the run's user of a release
-- before events): writing them fails then inside a pcall (event), and
-- loses the event, not the grant, as a KEY refused would fail the script.
--   events:  stream, what happened to the key (log): its events, oldest
--            first, trimmed to about MAXEVENTS; the entry id's ms is when
--   stats:   hash, its counters (count): "grants", "busy", "timeouts",
--            "losses", "revokes" -> the events of those kinds; "w:<ms>",
--            "h:<ms>" -> the grants' waits and the releases' holds in
--            the bucket whose upper bound is ms (BUCKETS; "w:inf",
--            "h:inf": longer than the last), and "w<i>", "h<i>" -> those
--            counted in bucket i of the buckets before (OLDBUCKETS; no
--            longer written); "wsum", "hsum" -> their sums, ms; "recent"
--            -> a moving average of the holds, ms (RECENTWEIGHT); "cap" ->
--            the capacity the latest grant asked, which status reports
--            of a key idle once its records expired; "#until" -> when
--            both expire
--            These two outlive the others: EVENTLIFE after the last event.
-- and, not among KEYS either (its name is info's, ending "policy"):
--   policy:  hash, what an operator set (key.lua): "cap" -> the stored
--            capacity; "paused" -> 1, "until" -> its end (ms; 0: none),
--            "reason"; "revoked <public id>" -> "<ms> <reason>". It never
--            expires; the other scripts only read it.
-- ARGV is name, value, name, value...; a reply is the same, read by name.
-- A waiter's id is the permit id it will hold. When its turn comes, the
-- script that made it gives it its permit and pushes a turn record to its
-- wake list: the prefix the wake argument names, ":" and the first 16 hex
-- digits of the SHA-1 of its member (in the key's hash slot; it blocks on
-- it with BLPOP). Meta is opaque to the scripts.
--
-- Every script's work grows with the logarithm of the line and the
-- holders (sorted sets), plus the permits it hands over: nothing walks a
-- whole set. Everything read back is checked (num, readHolder,
-- readWaiter): anyone who can write these keys may have written anything.
local holdersKey, infoKey, tokenKey, queueKey, waitersKey, leasesKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- The policy is named as info is, in the same hash slot; it is not among
-- KEYS (see keys.go), so that a run's ACL user may read it only. Nor are
-- the log and the counters, so that a user refused them still runs.
local policyKey = string.sub(infoKey, 1, -5) .. 'policy'
local eventsKey, statsKey = string.sub(infoKey, 1, -5) .. 'events', string.sub(infoKey, 1, -5) .. 'stats'

if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The limits (MAXTTL, MINTTL, MAXPERMITS, PERWAITER, MAXWAIT, MAXLINE,
-- CLAIM, WAKELIFE, MAXLIST, SWEEP, MAXBOUND, MAXCOOL, MAXREASON, MAXPAUSE,
-- MAXINT, MAXEVENTS, EVENTLIFE, EVENTREFRESH, MAXMETA, RECENTWEIGHT,
-- BUCKETS; ms for spans) come before this file, written from the Go
-- constants of limits.go, which say what each is.

-- args reads ARGV's names and values into a table, once.
local argsRead = nil
local function args()
  if not argsRead then
    argsRead = {}
    for i = 1, #ARGV - 1, 2 do argsRead[ARGV[i]] = ARGV[i + 1] end
  end
  return argsRead
end

-- num reads a whole number from lo to hi, or nil for anything else.
local function num(v, lo, hi)
  if type(v) == 'number' then v = string.format('%d', v) end
  if type(v) ~= 'string' or #v > 16 or not string.match(v, '^%-?%d+$') then return nil end
  local n = tonumber(v)
  if n < lo or n > hi then return nil end
  return n
end

-- reply turns a table of named values into name, value, ... for the store,
-- leaving out those that say nothing (0, '', an empty list), which the
-- store reads as such: each value costs Redis its making.
local function reply(fields)
  local out, n = {}, 0
  for name, value in pairs(fields) do
    if value ~= 0 and value ~= '' and (type(value) ~= 'table' or value[1] ~= nil) then
      out[n + 1], out[n + 2], n = name, value, n + 2
    end
  end
  return out
end

-- bad lists, for the reply, the records this call dropped because they
-- were not records: the caller names them (once: they are gone).
local bad = {}
local function dropped(kind, rec)
  if #bad < 8 then bad[#bad + 1] = kind .. ' ' .. string.sub(rec or '(none)', 1, BADTEXT) end
end

-- A holder record: "<permits> <token> <granted ms> <weight> [s<slots> ]<meta>",
-- slots being the slots it holds ("0,3"; see grant), when it holds any.
-- Meta is JSON or nothing: it never starts with "s".
local function holderRecord(h)
  local slots = h.slots and ('s' .. h.slots .. ' ') or ''
  return string.format('%d %d %d %d ', h.permits, h.token, h.since, h.weight) .. slots .. h.meta
end

-- slotList reads slots as a holder record keeps them: at most MAXSLOTS
-- numbers below MAXSLOTS, increasing; nil for anything else.
local function slotList(text)
  if type(text) ~= 'string' or #text > MAXSLOTS * 5 then return nil end
  local out, last = {}, -1
  for part in string.gmatch(text .. ',', '([^,]*),') do
    local n = num(part, 0, MAXSLOTS - 1)
    if not n or n <= last then return nil end
    out[#out + 1], last = n, n
  end
  return out
end

-- readHolder reads a holder record; nil for one that is not. Slots that
-- are not its weight's slots are none.
local function readHolder(rec)
  local permits, token, since, weight, meta = string.match(rec or '', '^(%d+) (%d+) (%d+) (%d+) (.*)$')
  if not permits then return nil end
  permits, weight = num(permits, 1, MAXPERMITS), num(weight, 1, MAXPERMITS)
  token, since = num(token, 0, MAXINT), num(since, 0, MAXINT)
  if not (permits and weight and token and since) or weight > permits then return nil end
  local slots, rest = string.match(meta, '^s([%d,]+) (.*)$')
  if slots then
    meta = rest
    local list = slotList(slots)
    if not list or #list ~= weight then slots = nil end
  end
  return {permits = permits, token = token, since = since, weight = weight, slots = slots, meta = meta}
end

-- A waiter record: "<lease expiry ms> <permits> <weight> <since ms> <ttl ms>
-- [q<priority>,<age ms> ]<meta>", the priority and the age its place was
-- counted with (place) when either is not 0. The lease expiry that counts
-- is the leases set's; the record keeps one for status.
local function waiterRecord(w)
  local order = ''
  if (w.prio or 0) ~= 0 or (w.age or 0) ~= 0 then order = string.format('q%d,%d ', w.prio or 0, w.age or 0) end
  return string.format('%d %d %d %d %d ', w.expiry, w.permits, w.weight, w.since, w.ttl) .. order .. w.meta
end

-- readWaiter reads a waiter record; nil for one that is not. An order
-- that is not one is none.
local function readWaiter(rec)
  local expiry, permits, weight, since, ttl, meta = string.match(rec or '', '^(%d+) (%d+) (%d+) (%d+) (%d+) (.*)$')
  if not expiry then return nil end
  permits, weight, ttl = num(permits, 1, MAXPERMITS), num(weight, 1, MAXPERMITS), num(ttl, 0, MAXTTL)
  expiry, since = num(expiry, 0, MAXINT), num(since, 0, MAXINT)
  if not (permits and weight and ttl and expiry and since) or weight > permits then return nil end
  local prio, age, rest = string.match(meta, '^q(%-?%d+),(%d+) (.*)$')
  if prio then meta = rest end
  return {expiry = expiry, permits = permits, weight = weight, since = since, ttl = ttl, meta = meta,
    prio = num(prio, -MAXPRIO, MAXPRIO) or 0, age = num(age, 0, MAXAGE) or 0}
end

-- place is a waiter's score in the line (lowest first): its arrival,
-- since, less its priority times the age (NOAGE without one), so that
-- with one age the order never changes while waiters wait; times TIES,
-- with its ticket's last ten bits, so that equal ones keep their order
-- of arrival. Exact in a double for any clock of this century.
local function place(since, prio, age, ticket)
  if age <= 0 then age = NOAGE end
  return (since - prio * age) * TIES + ticket % TIES
end

-- A turn record, pushed to a waiter's wake list: "g <token> <lease expiry
-- ms>[ <slots>[ <slot names>]]" gives it its permit; "c <ms>" (watch.lua) asks it to look again
-- then (a permit handed to a waiter before it may lapse unclaimed); "s
-- <meta>" tells it that the newer caller of meta superseded it (supersede).
local function turnRecord(token, expiry, slots, names)
  local rec = string.format('g %d %d', token, expiry)
  if slots then rec = rec .. ' ' .. slots end
  if slots and names then rec = rec .. ' ' .. names end
  return rec
end

-- member is the name the permit of id goes by in the keys: its SHA-1, 40
-- hex digits. Whoever may read the keys learns members, never ids, and
-- every script takes an id, never a member (a member given as an id is
-- hashed again): reading the keys lets nobody renew, release or take a
-- permit, nor run under a hold or end it.
local function member(id)
  return redis.sha1hex(id)
end

-- wakekey names a waiter's wake list, from its member: after a hash of it.
local function wakekey(prefix, id)
  return prefix .. ':' .. string.sub(redis.sha1hex(id), 1, 16)
end

-- used is how many permits the holders take (kept in "#used": counting
-- them would walk every holder). A key without holders takes none, which
-- heals a count that went wrong; a count that is not one is counted anew
-- from the holders, once. The second value is true for a key without
-- holders (takeSlots).
local function used()
  if redis.call('ZCARD', holdersKey) == 0 then return 0, true end
  local n = num(redis.call('HGET', infoKey, '#used'), 0, MAXINT)
  if n then return n end
  n = 0
  local ids = redis.call('ZRANGE', holdersKey, 0, -1)
  for i = 1, #ids, 500 do
    local recs = redis.call('HMGET', infoKey, unpack(ids, i, math.min(i + 499, #ids)))
    for j = 1, #recs do
      local h = readHolder(recs[j])
      n = n + (h and h.weight or 1)
    end
  end
  redis.call('HSET', infoKey, '#used', n)
  return n
end

-- removeHolder ends a holder's permit, freeing the permits its weight
-- took; one whose record is not one took one. The count is read before the holder
-- goes, as a count counted anew must include it. It returns the holder
-- (nil for a record that is not one), and whether it was cooling: given
-- back already.
local function removeHolder(id)
  local u = used()
  local f = redis.call('HMGET', infoKey, id, '#cool ' .. id, '#slotlow')
  local h = readHolder(f[1])
  redis.call('ZREM', holdersKey, id)
  local gone = {id, '#claim ' .. id, '#bound ' .. id, '#min ' .. id, '#cool ' .. id}
  local set = {'#used', math.max(u - (h and h.weight or 1), 0)}
  -- Its slots, those that are still its own; the lowest freed may be the
  -- next grant's (takeSlots).
  local slots = h and h.slots and slotList(h.slots)
  if slots then
    local names = {}
    for i, n in ipairs(slots) do names[i] = '#slot ' .. n end
    local owners = redis.call('HMGET', infoKey, unpack(names))
    for i = 1, #names do
      if owners[i] == id then gone[#gone + 1] = names[i] end
    end
    local low = num(f[3], 0, MAXSLOTS)
    if low and slots[1] < low then set[3], set[4] = '#slotlow', slots[1] end
  end
  redis.call('HDEL', infoKey, unpack(gone))
  redis.call('HSET', infoKey, unpack(set))
  return h, num(f[2], -1, 255) ~= nil
end

-- claimed makes a permit handed over a lease in full: its waiter took its
-- turn. It returns the lease's expiry, never past the permit's bound.
-- rec, when given, is its '#claim' and '#bound' as the caller read them.
local function claimed(id, rec)
  rec = rec or redis.call('HMGET', infoKey, '#claim ' .. id, '#bound ' .. id)
  local full = num(rec[1], 0, now + MAXTTL)
  if not full then return nil end
  full = math.min(full, num(rec[2], 0, MAXINT) or full)
  redis.call('HDEL', infoKey, '#claim ' .. id)
  redis.call('ZADD', holdersKey, 'XX', full, id)
  return full
end

-- waiting is how many wait in line, read once a script until the line
-- changes (dropWaiter; a caller that joins it sets inLine to nil).
local inLine = nil
local function waiting()
  if not inLine then inLine = redis.call('ZCARD', queueKey) end
  return inLine
end

-- dropWaiter takes a waiter out of the line ('#many <id>' marks a
-- caller of several keys: see handoff).
local function dropWaiter(id)
  inLine = nil
  redis.call('ZREM', queueKey, id)
  redis.call('ZREM', leasesKey, id)
  redis.call('HDEL', waitersKey, id, '#many ' .. id)
end

-- publicID is the id status shows of a holder, and an operator revokes
-- it by: a hash of its member.
local function publicID(id)
  return string.sub(redis.sha1hex(id), 1, 10)
end

-- What happened to the key: each event goes to its log (events), unless
-- the caller keeps none (quiet: semaphore's NoEvents), and is counted
-- (stats). Writing them can never stop a script half way: event runs in a
-- pcall, after the state it tells of is written, so a failure (a key
-- someone else wrote, an ACL user not allowed XADD) loses the event or the
-- count, never a grant or a release.
local quiet = args().quiet == '1'
-- fresh is 1 once this script pushed the end of the log's and the
-- counters' life (count): the caller then lists the key in the store's
-- index, outside the key's hash slot (keys.go's Index).
local fresh = 0
-- newLog: this script started the key's log, which has no TTL yet.
local newLog = false

-- counted is a whole number as the scripts read it back: a count Redis
-- answered, bounded; 0 for one that is none (see num, which also reads
-- records: this one is cheaper, for the counters each event reads).
local function counted(v)
  v = tonumber(v)
  if not v or v < 0 or v > MAXINT or v ~= math.floor(v) then return 0 end
  return v
end

-- metaOf is a record's meta as an event keeps it: bounded.
local function metaOf(meta)
  if type(meta) ~= 'string' or #meta > MAXMETA then return '' end
  return meta
end

-- wrongType tells the error of a command on a key of another type.
local function wrongType(err)
  local msg = type(err) == 'table' and err.err or tostring(err)
  return string.find(msg or '', 'WRONGTYPE', 1, true) ~= nil
end

-- The counter each kind of event raises; the others raise none.
local COUNTERS = {grant = 'grants', busy = 'busy', timeout = 'timeouts', lost = 'losses', revoke = 'revokes'}

-- record logs and counts e (see event): one function, as every function
-- lib.lua defines is made anew by each call of a script.
local function record(e, hist, ms)
  -- The log, trimmed to about MAXEVENTS: to whole nodes, which keeps the
  -- cost flat. Every event has the same fields, in the same order, ''
  -- where it has none, so that a stream keeps their names once a node (a
  -- hundred entries), not once an entry: e, its kind; id, the holder's
  -- public id; m, its record (meta, at most MAXMETA bytes); n, the
  -- capacity it asked; w, its weight; t, its token; x, a release's exit
  -- status; held, wait and cool, ms; cap, a capacity stored (0: unset);
  -- why, a reason; until, a pause's length, ms (0: until resumed); f, 1
  -- for a forced revoke; s, the holder's slots ("0,3"); by, the record
  -- of the newer caller that superseded a waiter. DecodeEvent
  -- (events.go) reads them. NOMKSTREAM
  -- tells a new log, which the count below gives its life; a Redis before
  -- 6.2 refuses it, and then a log with no life yet is a new one (PTTL),
  -- so that it does not renew the life, and the index, at every event.
  if not quiet then
    local argv = {'e', e.e, 'id', e.id or '', 'm', e.m or '', 'n', e.n or '', 'w', e.w or '', 't', e.t or '',
      'x', e.x or '', 'held', e.held or '', 'wait', e.wait or '', 'cool', e.cool or '', 'cap', e.cap or '',
      'why', e.why or '', 'until', e['until'] or '', 'f', e.f or '', 's', e.s or '', 'by', e.by or ''}
    local ok, added = pcall(redis.call, 'XADD', eventsKey, 'NOMKSTREAM', 'MAXLEN', '~', MAXEVENTS, '*', unpack(argv))
    if not (ok and added) then
      if not ok and wrongType(added) then
        -- A log that is no stream (someone else wrote it) makes way.
        pcall(redis.call, 'DEL', eventsKey)
      end
      if pcall(redis.call, 'XADD', eventsKey, 'MAXLEN', '~', MAXEVENTS, '*', unpack(argv)) then
        local okTTL, ttl = pcall(redis.call, 'PTTL', eventsKey)
        newLog = not okTTL or ttl == -1
      end
    end
  end

  -- The counters: the event's own, and, with hist, ms in a histogram ('w'
  -- a grant's wait, 'h' a release's hold, which also moves the recent
  -- hold), in BUCKETS' bucket. Two commands whatever it counts: HMGET,
  -- then HSET. A count read back that is none, or too large to count on,
  -- counts anew from 0, as after a loss of the data. The first count, a
  -- new log, and one an hour push the end of both keys' life to EVENTLIFE
  -- from now.
  local names, adds = {'#until'}, {0} -- the fields read, and what each adds (false: the recent hold)
  if COUNTERS[e.e] then names[2], adds[2] = COUNTERS[e.e], 1 end
  if hist then
    ms = math.max(ms, 0)
    local b = #BUCKETS + 1
    for i = #BUCKETS, 1, -1 do
      if ms <= BUCKETS[i] then b = i end
    end
    local i = #names
    names[i + 1], adds[i + 1] = hist .. ':' .. (BUCKETS[b] or 'inf'), 1
    names[i + 2], adds[i + 2] = hist .. 'sum', ms
    if hist == 'h' then names[i + 3], adds[i + 3] = 'recent', false end
  end
  local ok, got = pcall(redis.call, 'HMGET', statsKey, unpack(names))
  if not ok then
    if not wrongType(got) then return end
    -- Counters that are no hash (someone else wrote them) make way.
    pcall(redis.call, 'DEL', statsKey)
    got = {}
  end
  local set = {}
  for i = 2, #names do
    local v = counted(got[i])
    if adds[i] then
      v = v + adds[i]
      if v > MAXINT then v = adds[i] end
    elseif v > 0 then
      v = math.floor(v * (1 - RECENTWEIGHT) + ms * RECENTWEIGHT)
    else
      v = ms
    end
    set[#set + 1], set[#set + 2] = names[i], v
  end
  -- A grant's capacity outlives the key's records here: an idle key's.
  if e.e == 'grant' and num(e.n, 1, MAXPERMITS) then set[#set + 1], set[#set + 2] = 'cap', e.n end
  local ends = counted(got[1])
  local renew = newLog or ends < now + EVENTLIFE - EVENTREFRESH or ends > now + EVENTLIFE
  if renew then
    set[#set + 1], set[#set + 2] = '#until', now + EVENTLIFE
  end
  if #set > 0 then pcall(redis.call, 'HSET', statsKey, unpack(set)) end
  if renew then
    pcall(redis.call, 'PEXPIRE', statsKey, EVENTLIFE)
    pcall(redis.call, 'PEXPIRE', eventsKey, EVENTLIFE)
    fresh = 1
  end
end

-- event writes e, an event (its fields by record's names; e.e is its
-- kind), and counts it, with hist and ms (see record).
local function event(e, hist, ms)
  pcall(record, e, hist, ms)
end

-- holderEvent is the event of kind of holder id, h its record (nil when
-- it is not one), with fields more.
local function holderEvent(kind, id, h, more)
  local e = more or {}
  e.e, e.id = kind, publicID(id)
  if h then
    e.m, e.n, e.w, e.t, e.s = metaOf(h.meta), h.permits, h.weight, h.token, h.slots
  end
  return e
end

-- released records the release of id, whose record was h, with the exit
-- status of its command (-1: unknown) and the ms it stays taken.
local function released(id, h, exit, cooling)
  local held = h and math.max(now - h.since, 0)
  event(holderEvent('release', id, h, {x = exit >= 0 and exit or '', held = held or '', cool = cooling > 0 and cooling or ''}),
    held and 'h', held)
end

-- lost records the loss of id, whose record was h (read when nil), found
-- lapsed since at.
local function lost(id, h, at)
  pcall(function()
    h = h or readHolder(redis.call('HGET', infoKey, id))
    local held = h and math.max(math.min(at, now) - h.since, 0)
    event(holderEvent('lost', id, h, {held = held or ''}))
  end)
end

-- A permit's terms, kept beside its lease: '#bound <id>', the server
-- time past which it is never renewed (its holder's max runtime,
-- kill-after and a margin after its grant), and '#min <id>', the time
-- until which it stays taken, as cooling, once given back or lapsed (its
-- min hold after its grant). A direct grant records them (grant); a
-- permit handed over has them recorded by its holder's first call, which
-- knows them (recordTerms). A holder that stops renewing, hangs or is
-- old then frees its permit by its bound, and one that crashed, or whose
-- release never came, still cools: the keys live until its min hold ends
-- (coolUntil, keepalive), whether or not anyone calls, so that the first
-- call after a silence finds its lease lapsed and cools it (sweep).

-- coolUntil is the latest min hold end this call recorded, or cooling it
-- made: keepalive keeps the keys at least that long.
local coolUntil = 0
local function coolsUntil(ends)
  if ends and ends > coolUntil then coolUntil = ends end
end

-- terms reads id's bound and min hold end (nil: none), whether it cools,
-- and, for claimed, its '#claim' and '#bound' as they are (all in one
-- call: a renewal needs each).
local function terms(id)
  local f = redis.call('HMGET', infoKey, '#bound ' .. id, '#min ' .. id, '#cool ' .. id, '#claim ' .. id)
  return num(f[1], 0, MAXINT), num(f[2], 0, MAXINT), num(f[3], -1, 255) ~= nil, {f[4], f[1]}
end

-- cool keeps id's permit taken until ends, with the exit status of its
-- command (-1: unknown): nobody renews it; the sweep removes it then.
local function cool(id, ends, exit)
  coolsUntil(ends)
  redis.call('ZADD', holdersKey, 'XX', ends, id)
  redis.call('HDEL', infoKey, '#claim ' .. id, '#bound ' .. id)
  redis.call('HSET', infoKey, '#cool ' .. id, exit)
end

-- sweep removes, a few at a time in expiry order, the holders whose lease
-- lapsed and the waiters whose lease lapsed (gone without leaving:
-- killed, host lost). A permit handed over whose waiter took its turn is
-- not lapsed: it becomes a full lease. One whose waiter never took it is
-- taken back, with the turn. One with a min hold that has not passed
-- cools until it has (terms). It tells whether it removed any, since that
-- can give someone else their turn.
local function sweep(wake)
  local changed = false
  local lapsed = redis.call('ZRANGEBYSCORE', holdersKey, '-inf', now, 'WITHSCORES', 'LIMIT', 0, SWEEP)
  for i = 1, #lapsed, 2 do
    local id, at = lapsed[i], tonumber(lapsed[i + 1]) or now
    local f = redis.call('HMGET', infoKey, '#claim ' .. id, '#min ' .. id, '#cool ' .. id)
    local k = f[1] and wake and wakekey(wake, id)
    local minEnd = num(f[2], 0, now + MAXCOOL)
    -- A cooling was given back: its end is no loss.
    local cooled = num(f[3], -1, 255) ~= nil
    if k and redis.call('EXISTS', k) == 0 and (claimed(id) or 0) > now then
      -- taken: a lease in full from now on
    elseif minEnd and minEnd > now then
      if k then redis.call('DEL', k) end
      cool(id, minEnd, -1)
      if not cooled then lost(id, nil, at) end
    else
      if k then redis.call('DEL', k) end
      local h = removeHolder(id)
      if not cooled then lost(id, h, at) end
      changed = true
    end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', leasesKey, '-inf', now, 'LIMIT', 0, SWEEP)) do
    dropWaiter(id)
    changed = true
  end
  return changed
end

-- Bounded readings of the key's own fields.
local function field(name, lo, hi)
  return num(redis.call('HGET', infoKey, name), lo, hi)
end

-- revokedMark is the revoke an operator recorded for id ("<ms>
-- <reason>"), or nil; a policy that is no hash holds none.
local function revokedMark(id)
  local ok, mark = pcall(redis.call, 'HGET', policyKey, 'revoked ' .. publicID(id))
  if ok and type(mark) == 'string' then return mark end
  return nil
end

-- policy is what an operator set on the key, read once per script: cap,
-- the stored capacity (nil: none), and paused, nil or {reason, left}
-- (left: ms until it ends, 0 for none). A pause past its end is none.
local policyRead = nil
local function policy()
  if not policyRead then
    -- A policy that is no hash (someone else wrote it) holds no settings.
    local ok, f = pcall(redis.call, 'HMGET', policyKey, 'cap', 'paused', 'until', 'reason', 'slots', 'age')
    if not ok then
      dropped('policy', 'not a hash')
      f = {}
    end
    policyRead = {cap = num(f[1], 1, MAXPERMITS)}
    -- Names of the slots, as many as the stored capacity (slotNames).
    if policyRead.cap and num(f[5], 1, MAXSLOTS) == policyRead.cap then policyRead.named = true end
    -- The age the line orders its waiters by, when an operator set one.
    policyRead.age = num(f[6], 1, MAXAGE)
    local untilMs = num(f[3] or '0', 0, MAXINT)
    if f[2] == '1' and untilMs and (untilMs == 0 or untilMs > now) then
      policyRead.paused = {reason = string.sub(f[4] or '', 1, MAXREASON), left = untilMs > 0 and untilMs - now or 0}
    end
  end
  return policyRead
end

-- slotNames are the names of slots ("0,3", as takeSlots chose them), "a,d",
-- when an operator named the key's slots (key.lua: policy "slots" -> how
-- many, "name <n>" -> slot n's); nil when not, or when a name is not one
-- (empty, too long, with a comma): unnamed rather than misnamed.
local function slotNames(slots)
  if not slots or not policy().named then return nil end
  local fields = {}
  for n in string.gmatch(slots, '%d+') do fields[#fields + 1] = 'name ' .. n end
  local ok, names = pcall(redis.call, 'HMGET', policyKey, unpack(fields))
  if not ok then return nil end
  for i = 1, #fields do
    local name = names[i]
    if type(name) ~= 'string' or name == '' or #name > MAXSLOTNAME or string.find(name, ',', 1, true) then return nil end
  end
  return table.concat(names, ',')
end

-- capacity is the capacity a caller that asked for n is admitted against:
-- the stored one, when an operator set one.
local function capacity(n)
  return policy().cap or n
end

-- A slot is a permit by its number, 0 to the capacity less one, on a key
-- of at most MAXSLOTS permits: '#slot <n>' in the info hash names its
-- holder's member, and the holder's record lists its slots (holderRecord),
-- so that removeHolder frees them. A grant takes the lowest free slots
-- below the capacity it is admitted against; the holders' weights
-- ("#used") fit in it, so that many are free below it, even when the
-- capacity was lowered below a slot held (which its holder keeps). A
-- slot whose holder is gone but still named (a release by a version
-- before slots, or someone else's write) is free.

-- holdsSlot tells whether o, whom '#slot <n>' names, holds slot n: it is
-- among the holders and its record lists n, as removeHolder frees it (a
-- name left by a grant of the same id that lapsed with the holders' set
-- is none). lists keeps each holder's slots, read once.
local function holdsSlot(o, n, lists)
  if not lists[o] then
    local h = redis.call('ZSCORE', holdersKey, o) and readHolder(redis.call('HGET', infoKey, o))
    lists[o] = {}
    for _, s in ipairs(h and h.slots and slotList(h.slots) or {}) do lists[o][s] = true end
  end
  return lists[o][n] == true
end

-- freeSlots are the lowest weight slots from from up, below c, that
-- '#slot' names no holder of, fewer when there are not so many; with
-- sure, a slot whose named holder does not hold it (holdsSlot) is free
-- too.
local function freeSlots(c, weight, sure, from)
  local free, lists = {}, {}
  while from < c and #free < weight do
    local names = {}
    for n = from, math.min(from + 63, c - 1) do names[#names + 1] = '#slot ' .. n end
    local owners = redis.call('HMGET', infoKey, unpack(names))
    for i = 1, #names do
      local o = owners[i]
      if not o or (sure and not holdsSlot(o, from + i - 1, lists)) then
        free[#free + 1] = from + i - 1
        if #free == weight then break end
      end
    end
    from = from + #names
  end
  return free
end

-- takeSlots chooses the slots of a grant of weight permits, admitted
-- against a capacity of c (nobody: the key has no holders): their
-- numbers, "0,3", or nil when the key numbers none (more than MAXSLOTS
-- permits); and the slot the next grant may look from. '#slotlow' is that
-- slot: every slot below it was held when it was written, and a release
-- lowers it to the lowest it frees, so that a grant need not read the
-- holders of the slots below it (a key of 1,024 permits whose first 1,023
-- are held reads one). It is only where to start: the first look trusts
-- it and the names; only when it finds too few does it look from 0, then
-- whether each holder named holds the slot. Too few even then (a count
-- of holders gone wrong) is none, rather than a slot another holds.
local function takeSlots(c, weight, nobody)
  if c > MAXSLOTS then return nil end
  local free = {}
  if nobody then
    -- Without holders every slot is free, whatever names the info hash
    -- kept (it may outlive the holders' set): no look at all.
    for n = 0, weight - 1 do free[#free + 1] = n end
  else
    local low = field('#slotlow', 0, MAXSLOTS) or 0
    if low >= c then low = 0 end
    free = freeSlots(c, weight, false, low)
    if #free < weight and low > 0 then free = freeSlots(c, weight, false, 0) end
    if #free < weight then free = freeSlots(c, weight, true, 0) end
  end
  if #free < weight then return nil end
  local after = free[#free] + 1
  for i, n in ipairs(free) do free[i] = string.format('%d', n) end
  return table.concat(free, ','), after
end

-- grant gives id a permit of a capacity of n, taking weight permits, until
-- expiry, and returns its fencing token, nil, and its slots (takeSlots).
-- The token is seeded from the
-- server's clock in microseconds, so tokens keep rising even after the
-- keys expired or the store lost its data. A token that is not a number
-- the scripts can raise exactly stops every grant of this key, with an
-- error the store names: going on would break its promise to rise.
local function grant(id, n, weight, ttl, expiry, meta, hard, minEnd)
  local last = redis.call('GET', tokenKey)
  local token = 0
  if last then
    token = num(last, 0, MAXINT - 1)
    if not token then
      return nil, 'TOKENLIMIT the fencing token ' .. string.format('%q', string.sub(last, 1, 40)) .. ' cannot be raised'
    end
  end
  token = math.max(token + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', tokenKey, string.format('%d', token))
  -- Counted before the holder is added, as a count counted anew would
  -- include it.
  local u, nobody = used()
  -- Before id is among the holders: a '#slot' name its dropped record left
  -- (acquire.lua) is then no holder's, and frees its slot for it.
  local slots, low = takeSlots(capacity(n), weight, nobody)
  redis.call('ZADD', holdersKey, expiry, id)
  local fields = {id, holderRecord{permits = n, token = token, since = now, weight = weight, slots = slots, meta = meta},
    '#clock', now, '#ttl', math.max(ttl, field('#ttl', 0, MAXTTL) or 0), '#used', u + weight}
  if low then fields[#fields + 1], fields[#fields + 2] = '#slotlow', low end
  for slot in string.gmatch(slots or '', '%d+') do
    fields[#fields + 1], fields[#fields + 2] = '#slot ' .. slot, id
  end
  if hard then
    fields[#fields + 1], fields[#fields + 2] = '#bound ' .. id, hard
  end
  if minEnd then
    fields[#fields + 1], fields[#fields + 2] = '#min ' .. id, minEnd
    coolsUntil(minEnd)
  end
  redis.call('HSET', infoKey, unpack(fields))
  return token, nil, slots
end

-- recordTerms records the terms id's holder asked for (see terms), where none
-- are yet: its bound asked ms and its min hold cool ms after its grant,
-- at since (read from its record when nil); hard and minEnd are those
-- read already. It returns them.
local function recordTerms(id, asked, cool, hard, minEnd, since)
  if (hard or asked <= 0) and (minEnd or cool <= 0) then return hard, minEnd end
  if not since then
    local h = readHolder(redis.call('HGET', infoKey, id))
    if not h then return hard, minEnd end
    since = h.since
  end
  local fields = {}
  if not hard and asked > 0 then
    hard = since + asked
    fields[#fields + 1], fields[#fields + 2] = '#bound ' .. id, hard
  end
  if not minEnd and cool > 0 then
    minEnd = since + cool
    fields[#fields + 1], fields[#fields + 2] = '#min ' .. id, minEnd
    coolsUntil(minEnd)
  end
  redis.call('HSET', infoKey, unpack(fields))
  return hard, minEnd
end

-- silence is how far rebase pushes leases back now, from the key's last
-- reading of the clock and its longest lease (see rebase): the ms the key
-- has been silent beyond half that lease, at most the lease; 0 for none.
local function silence(last, longest)
  if not last or not longest or now < last - 1000 or now - last <= longest / 2 then return 0 end
  return math.min(now - last - math.floor(longest / 2), longest)
end

-- pushed is where rebase pushes a lease that ends at score, by ms (see
-- silence): a lease the key's last reading saw alive moves by, but never
-- past the longest lease from now, and none is shortened.
local function pushed(score, last, longest, by)
  if by > 0 and score > last and score < now + longest then
    return math.min(score + by, now + longest)
  end
  return score
end

-- rebase compares the server's clock with the last reading a script of
-- the key made ('#clock'). Healthy holders renew at least every third of
-- the longest lease asked ('#ttl'), retrying for a sixth more, so a key
-- with holders is touched at least every half of it. A longer silence
-- means that the clock stepped forward, or that every holder stopped
-- renewing (crashed, cut off), and no script can tell which: the holders'
-- leases are pushed back by the silence beyond that half, so that a step
-- does not sweep holders whose commands still run; crashed holders' permits
-- take that much longer to free. No lease is pushed past the longest
-- lease from now, and none is shortened (a cooling lasts longer). A
-- bound moves with its lease. A step backwards only makes leases last
-- longer. It
-- returns the ms the holders were pushed back (0 when only coolings were:
-- nobody renews a cooling, so a silence then is no news), or minus the ms
-- the clock went back, or 0; and the reading it compared with (nil for
-- none).
--
-- status.lua reads a key as the next call would find it after rebase
-- (silence, pushed), without writing: a lease it finds lapsed cannot be
-- pushed back alive later, as the push grows no faster than the clock.
local function rebase()
  local rec = redis.call('HMGET', infoKey, '#clock', '#ttl')
  local last, longest = num(rec[1], 0, MAXINT), num(rec[2], 0, MAXTTL)
  if not last then return 0 end -- no holder yet, or the keys expired
  local moved = 0
  local by = silence(last, longest)
  if now < last - 1000 then
    moved = math.max(now - last, -MAXINT)
  elseif by > 0 then
    local held = redis.call('ZRANGEBYSCORE', holdersKey, string.format('(%d', last), '+inf', 'WITHSCORES')
    for i = 1, #held, 2 do
      local score = tonumber(held[i + 1])
      local to = pushed(score, last, longest, by)
      if to ~= score then redis.call('ZADD', holdersKey, 'XX', to, held[i]) end
      local hard = field('#bound ' .. held[i], 0, MAXINT)
      if hard then redis.call('HSET', infoKey, '#bound ' .. held[i], hard + by) end
      if moved == 0 and not redis.call('HGET', infoKey, '#cool ' .. held[i]) then moved = by end
    end
  end
  redis.call('HSET', infoKey, '#clock', now)
  return moved, last
end

-- The restart fence: while the server has been up for less than the
-- fence, in whole seconds of uptime (rounded down, so it ends late rather
-- than early), no permit is granted, so that a holder from before a
-- restart that lost its permit has stopped its command before anyone else
-- starts one. The fence also starts anew when the key was last served
-- under another replication id: a replica promoted by a failover, which
-- may lack the latest grants. '#fencefrom' is when the latest fence
-- started (the server's start, or the failover seen).
--
-- Its length is the longest this caller asked, or any caller whose lease
-- may still exist ('#fencelen', until '#fenceuntil'), but never more than
-- that caller's own lease: a holder's command stops within its lease, so
-- a longer fence protects nobody, and no caller can freeze the key for
-- others beyond its own lease.
local fenceAsked = 0

-- fence is the key's fence fields, read once per script and kept up to
-- date as the script writes them: len and untilMs of the longest fence
-- remembered (0 once it lapsed), from when the latest fence started.
local fenceRead = nil
local function fence()
  if not fenceRead then
    local rec = redis.call('HMGET', infoKey, '#fencelen', '#fenceuntil', '#fencefrom')
    local len, untilMs = num(rec[1], 0, MAXTTL), num(rec[2], 0, MAXINT)
    if not len or not untilMs or untilMs <= now then len, untilMs = 0, 0 end
    fenceRead = {len = len, untilMs = untilMs, from = num(rec[3], 0, now)}
  end
  return fenceRead
end

-- remember records this caller's fence (asked, capped at its lease ttl)
-- for as long as a lease of it may exist: life ms from now.
local function remember(asked, ttl, life)
  fenceAsked = asked
  local c, f = math.min(asked, ttl), fence()
  if c <= 0 then return end
  if c > f.len then
    f.len, f.untilMs = c, now + life
    redis.call('HSET', infoKey, '#fencelen', f.len, '#fenceuntil', f.untilMs)
  elseif c == f.len and now + life > f.untilMs then
    f.untilMs = now + life
    redis.call('HSET', infoKey, '#fenceuntil', f.untilMs)
  end
end

-- fenceLeft is how many ms are left of the fence the key knows, without
-- asking the server.
local function fenceLeft()
  local f = fence()
  local len = math.max(f.len, fenceAsked)
  if not f.from or len <= 0 then return 0 end
  return math.max(f.from + len - now, 0)
end

-- restartedAt is when the server last started, or took over as master
-- under a replication id the key has not seen yet (ms on its clock; 0
-- when it cannot tell), from INFO; with the replication id and the one
-- the key last saw, for fenced() to remember. A server that has no such
-- INFO is not fenced; with strict, a user not allowed INFO must hear of
-- it, not lose the fence in silence.
local function restartedAt(strict)
  local function serverInfo(section, also)
    local ok, out
    if also then
      ok, out = pcall(redis.call, 'INFO', section, also)
    else
      ok, out = pcall(redis.call, 'INFO', section)
    end
    if ok then return type(out) == 'string', out end
    local msg = type(out) == 'table' and out.err or tostring(out)
    if strict and (string.find(msg, 'NOPERM', 1, true) or string.find(msg, "can't run this command", 1, true)) then
      error('NOPERM semrun needs INFO (' .. section .. ') for the restart fence: ' .. msg)
    end
    return false, nil
  end
  -- A field's value, found as plain text: a pattern tried at every place
  -- of the long text cost more than the INFO.
  local function infoField(info, name, pattern)
    local at = string.find(info, '\n' .. name .. ':', 1, true)
    return at and string.match(info, pattern, at + #name + 2)
  end
  local from = 0
  -- Redis 7 answers both sections in one call (before 7, one a call).
  local both = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000
  local ok, info = serverInfo('server', both and 'replication' or nil)
  local up = ok and num(infoField(info, 'uptime_in_seconds', '^(%d+)'), 0, MAXINT)
  if up then from = now - up * 1000 end
  if not both then ok, info = serverInfo('replication') end
  local replid = ok and infoField(info, 'master_replid', '^(%x+)')
  local seen = nil
  if replid then
    seen = redis.call('HGET', infoKey, '#replid')
    if seen and seen ~= replid then from = now end
  end
  return from, replid, seen
end

-- fenced is how many ms are left of the restart fence, asking the server
-- for its uptime and replication id (once per script): only a call that
-- may grant needs to.
local fenceChecked = false
local function fenced()
  if fenceChecked then return fenceLeft() end
  fenceChecked = true
  if math.max(fence().len, fenceAsked) <= 0 then return 0 end
  local from, replid, seen = restartedAt(true)
  if replid and seen ~= replid then
    redis.call('HSET', infoKey, '#replid', replid)
  end
  if from > (fence().from or -1) then
    fence().from = from
    redis.call('HSET', infoKey, '#fencefrom', from)
  end
  return fenceLeft()
end

-- fencePeek is how many ms are left of the restart fence the key knows,
-- as fenced() would find it, without writing anything: for status, which
-- changes nothing. 0 when the key keeps no fence, and where INFO is
-- refused (status says less then, and grants are refused with NOPERM).
local function fencePeek()
  local f = fence()
  if f.len <= 0 then return 0 end
  local from = restartedAt(false)
  return math.max(math.max(f.from or 0, from) + f.len - now, 0)
end

-- handoff gives the waiters whose turn it is their permits: walking the
-- line from its head, each waiter that fits beside the holders and the
-- waiters before it, under its own N. The first that does not fit ends
-- the walk, so nobody passes a waiter, however heavy. Waiters whose lease
-- lapsed, or whose record is not one, leave the line on the way (a few).
--
-- Each gets its turn pushed to its wake list and starts its command as
-- soon as it reads it, without asking again. Until then its permit is
-- only claimed: it lapses after CLAIM unless the waiter took the turn
-- (sweep), so a waiter that died in line frees its permit in seconds. The
-- wake lists are listed in handed: the caller looks whether each turn
-- was taken at once, and if not has the first waiter left in line look
-- again when the claim lapses (watch.lua). The element stays until read,
-- so none is lost while the waiter is busy; a list whose waiter is gone
-- vanishes once the lease it carries could have lapsed. It returns the
-- longest lease it granted, the permits it gave, and an error for a token it
-- cannot raise.
--
-- A caller of several keys ('#many <id>' in the waiters' hash, many.lua)
-- is granted only by its own call, which sees every key it waits for at
-- once: the walk stops at it, so that nobody passes it, and, when it
-- would fit here, its wake list gets a "c <now>" asking it to look again
-- (unless it is the caller: manyCaller).
local handed = {}
local manyCaller = nil
local function handoff(wake, busy)
  local longest, given, skipped = 0, 0, 0
  while true do
    local head = redis.call('ZRANGE', queueKey, 0, 0)[1]
    if not head then break end
    -- Its record and its mark as a caller of several keys, in one call.
    local rec = redis.call('HMGET', waitersKey, head, '#many ' .. head)
    local w = readWaiter(rec[1])
    local lease = num(redis.call('ZSCORE', leasesKey, head), 0, MAXINT)
    if not w or not lease or lease <= now then
      if skipped >= SWEEP then break end
      if not w then dropped('waiter', rec[1]) end
      dropWaiter(head)
      skipped = skipped + 1
    elseif w.weight > capacity(w.permits) then
      -- Heavier than the stored capacity: it would stop the line for
      -- ever. It hears why when it asks again.
      if skipped >= SWEEP then break end
      dropWaiter(head)
      skipped = skipped + 1
    else
      if busy + w.weight > capacity(w.permits) or fenced() > 0 or policy().paused then break end
      local k = wakekey(wake, head)
      -- (EXISTS, not LLEN: a command the ACL users of the docs allow.)
      if rec[2] then
        if head ~= manyCaller and redis.call('EXISTS', k) == 0 then
          redis.call('RPUSH', k, 'c ' .. now)
          redis.call('PEXPIRE', k, WAKELIFE)
        end
        break
      end
      -- The wake list first: refused while its slot migrates, it leaves no
      -- grant behind that a retry would not announce.
      redis.call('DEL', k)
      local token, err, slots = grant(head, w.permits, w.weight, w.ttl, now + math.min(CLAIM, w.ttl), w.meta)
      if not token then return longest, given, err end
      redis.call('HSET', infoKey, '#claim ' .. head, now + w.ttl)
      dropWaiter(head)
      redis.call('RPUSH', k, turnRecord(token, now + w.ttl, slots, slotNames(slots)))
      -- The list outlives the lease it carries: a sweep takes a missing
      -- list for a turn taken, and must not after an idle minute.
      redis.call('PEXPIRE', k, math.max(WAKELIFE, w.ttl + CLAIM))
      handed[#handed + 1] = k
      longest = math.max(longest, w.ttl)
      given = given + w.weight
      busy = busy + w.weight
      -- Granted here, once: its waiter takes the turn without a call.
      -- It waited since its call began (its record's since).
      local waited = math.max(now - w.since, 0)
      event({e = 'grant', id = publicID(head), m = metaOf(w.meta), n = w.permits, w = w.weight, t = token, wait = waited,
        s = slots}, 'w', waited)
    end
  end
  return longest, given, nil
end

-- earliest is how long until the first lease can lapse; 0 with no holder.
local function earliest()
  local first = redis.call('ZRANGE', holdersKey, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return tonumber(first[2]) - now
end

-- wakeIn is when a waiter should ask again at the latest: when the fence
-- ends, or else when the earliest lease can lapse, or a pause end.
local function wakeIn()
  local f = fenceLeft()
  if f > 0 then return f end
  local e, p = earliest(), policy().paused
  if p and p.left > 0 and (e <= 0 or p.left < e) then return p.left end
  return e
end

-- keepalive makes every key live at least as long as the longest lease,
-- the restart fence, a min hold this call recorded (coolUntil), or ms,
-- and a second more, so an abandoned semaphore vanishes on its own. It
-- never shortens a key's life: a waiter's lease may be the longest, or a
-- min hold an earlier call recorded.
local function keepalive(ms)
  ms = math.max(ms, fenceLeft(), coolUntil - now) -- the fence outlives no key that keeps it
  local last = redis.call('ZRANGE', holdersKey, -1, -1, 'WITHSCORES')
  if #last > 0 then ms = math.max(ms, tonumber(last[2]) - now) end
  ms = math.min(ms, math.max(2 * MAXTTL, MAXCOOL))
  -- The log and the counters live on their own (count). The line's own
  -- keys hold nothing while nobody waits (the waiters' hash may keep its
  -- ticket counter): a waiter's lease is only given with its place.
  local keys = {holdersKey, infoKey, tokenKey, waitersKey}
  if waiting() > 0 then keys[5], keys[6] = queueKey, leasesKey end
  for _, key in ipairs(keys) do
    local left = redis.call('PTTL', key)
    if left == -1 or (left >= 0 and left < ms + 1000) then
      redis.call('PEXPIRE', key, ms + 1000)
    end
  end
end
