-- status.lua: read one semaphore without changing it. Permit ids are never
-- returned.
-- KEYS: see lib.lua. ARGV: list, how many holders and how many waiters to
-- list at most.
-- It reads the key as the next call would find it (a grant, a renewal):
-- with the holders' leases pushed back after a silence (rebase's silence
-- and pushed, in lib.lua), and a permit handed over counted until its full
-- lease while it may still be taken (see claimed): so a holder status
-- finds lapsed no renewal can bring back, and one a renewal would keep
-- is shown.
-- Reply (DecodeStatus in args.go), for the holders and waiters whose
-- lease has not lapsed:
--   now       the server's clock, ms
--   capacity  the capacity the latest caller asked; once the key's records
--             expired (idle), the one its latest grant asked (stats'
--             "cap"); else -1
--   held      the permits the holders take
--   holding   how many holders there are, lapsed ones not yet swept included
--   waiting   how many wait, lapsed ones not yet swept included
--   holders   {lease expiry ms (as the next call would find it), holder
--             record, cooling, public id} each,
--             at most list; cooling is '' for a holder, the exit status of
--             its command for a permit given back as cooling (release.lua)
--   waiters   the waiter records, in line, at most list
--   fenced    ms left of the restart fence, 0 for none (fencePeek)
--   stored, paused, reason, pausedfor: what an operator set (see
--             acquire.lua's reply)
--   counts    the key's counters (stats; see lib.lua), name, value, ...:
--             those it has, values of at most 20 bytes
--   slotnames the names of the key's slots, slot 0's first, when an
--             operator named them (see slotNames in lib.lua)
--   age       the priority age an operator stored, ms (0: none)
local a = args()
local list = num(a.list, 0, MAXLIST)
if not list then return redis.error_reply('ERR semrun: status.lua: bad arguments') end
local holders = {}
-- The permits taken: counted from the holders listed when that is all of
-- them, as their leases may have lapsed since the count ("#used") was kept.
local holding = redis.call('ZCARD', holdersKey)
local taken = 0
if list > 0 then
  local clock = redis.call('HMGET', infoKey, '#clock', '#ttl')
  local last, longest = num(clock[1], 0, MAXINT), num(clock[2], 0, MAXTTL)
  local by = silence(last, longest)
  -- A lease that lapsed longer than the longest lease ago can neither be
  -- pushed back alive nor be a hand-over's short one.
  local from = now
  if last and longest then from = now - longest end
  local held = redis.call('ZRANGEBYSCORE', holdersKey, string.format('(%d', from), '+inf', 'WITHSCORES', 'LIMIT', 0, list)
  for i = 1, #held, 2 do
    local id, score = held[i], tonumber(held[i + 1])
    local got = redis.call('HMGET', infoKey, id, '#cool ' .. id, '#claim ' .. id, '#bound ' .. id)
    local expiry = score
    if last then expiry = pushed(score, last, longest, by) end
    local full = num(got[3], 0, now + MAXTTL)
    if full then
      -- Handed over: the next renewal by its waiter takes it in full, to
      -- its bound (as rebase pushed it), whether its short lease lapsed.
      local hard = num(got[4], 0, MAXINT)
      if hard and last and score > last then hard = hard + by end
      expiry = math.min(full, hard or full)
    end
    if expiry > now then
      local rec = got[1] or ''
      local h = readHolder(rec)
      taken = taken + (h and h.weight or 1)
      holders[#holders + 1] = {expiry, rec, got[2] or '', publicID(id)}
    end
  end
end
if holding > list then taken = used() end
local waiters = {}
if list > 0 then
  for _, wid in ipairs(redis.call('ZRANGE', queueKey, 0, list - 1)) do
    local rec = redis.call('HGET', waitersKey, wid)
    local w = readWaiter(rec)
    local lease = num(redis.call('ZSCORE', leasesKey, wid), 0, MAXINT)
    if w and lease and lease > now then waiters[#waiters + 1] = rec end
  end
end
-- The counters, bounded: read by name, never all of a hash anyone may
-- have filled.
local names = {'grants', 'busy', 'timeouts', 'losses', 'revokes', 'wsum', 'hsum', 'recent'}
for i = 1, #BUCKETS + 1 do
  local b = BUCKETS[i] or 'inf'
  names[#names + 1], names[#names + 2] = 'w:' .. b, 'h:' .. b
end
for i = 1, OLDBUCKETS + 1 do
  names[#names + 1], names[#names + 2] = 'w' .. i, 'h' .. i
end
local counts = {}
local ok, got = pcall(redis.call, 'HMGET', statsKey, unpack(names))
if ok then
  for i = 1, #names do
    if type(got[i]) == 'string' and #got[i] <= 20 then
      counts[#counts + 1], counts[#counts + 2] = names[i], got[i]
    end
  end
end
local capOK, lastCap = pcall(redis.call, 'HGET', statsKey, 'cap')
local p = policy()
-- The slots' names, slot 0's first, when an operator named them.
local slotnames = {}
if p.named then
  local fields = {}
  for n = 0, p.cap - 1 do fields[#fields + 1] = 'name ' .. n end
  local ok, got = pcall(redis.call, 'HMGET', policyKey, unpack(fields))
  if ok then
    for i = 1, #fields do slotnames[i] = type(got[i]) == 'string' and string.sub(got[i], 1, MAXSLOTNAME + 1) or '' end
  end
end
return reply{now = now, capacity = field('#cap', 1, MAXPERMITS) or (capOK and num(lastCap, 1, MAXPERMITS)) or -1, held = taken,
  holding = holding, waiting = redis.call('ZCARD', queueKey),
  holders = holders, waiters = waiters, fenced = fencePeek(), stored = p.cap or 0,
  paused = p.paused and 1 or 0, reason = p.paused and p.paused.reason or '', pausedfor = p.paused and p.paused.left or 0,
  counts = counts, slotnames = slotnames, age = p.age or 0}
