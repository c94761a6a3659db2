-- lib.lua: the start of every script; the store sends it and a script's
-- own file as one (scripts.go). It holds what the scripts share: their
-- keys, arguments and replies, the records, the clock, the sweep and the
-- hand-over.
--
-- KEYS, the same for every script, in this order (keys.go names them):
--   holders: sorted set, permit id -> lease expiry (ms on the server's clock)
--   info:    hash, permit id -> holder record; "#cap" -> the capacity the
--            latest caller asked; "#clock", "#ttl" (rebase); "#fence",
--            "#fencelen", "#replid" (fenced)
--   token:   string, the last fencing token handed out
--   queue:   sorted set, waiter id -> ticket: the order of arrival
--   waiters: hash, waiter id -> waiter record; "#seq" -> the last ticket
-- ARGV is name, value, name, value...; a reply is the same, read by name.
-- A waiter's id is the permit id it will hold. When its turn comes, the
-- script that made it gives it its permit and pushes a turn record to its
-- wake list: the prefix the wake argument names, ":" and the first 16 hex
-- digits of the SHA-1 of its id (in the key's hash slot; it blocks on it
-- with BLPOP). Meta is opaque to the scripts.
local holdersKey, infoKey, tokenKey, queueKey, waitersKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- args reads ARGV's names and values into a table.
local function args()
  local a = {}
  for i = 1, #ARGV - 1, 2 do a[ARGV[i]] = ARGV[i + 1] end
  return a
end

-- reply turns a table of named values into name, value, ... for the store.
local function reply(fields)
  local out = {}
  for name, value in pairs(fields) do
    out[#out + 1] = name
    out[#out + 1] = value
  end
  return out
end

-- A holder record: "<permits> <token> <granted ms> <weight> <meta>".
local function holderRecord(h)
  return string.format('%d %d %d %d ', h.permits, h.token, h.since, h.weight) .. h.meta
end

-- readHolder reads a holder record; nil for one that is not.
local function readHolder(rec)
  local permits, token, since, weight, meta = string.match(rec or '', '^(%d+) (%d+) (%d+) (%d+) (.*)$')
  if not permits then return nil end
  return {permits = tonumber(permits), token = tonumber(token), since = tonumber(since), weight = tonumber(weight), meta = meta}
end

-- A waiter record: "<lease expiry ms> <permits> <weight> <since ms> <ttl ms> <meta>".
local function waiterRecord(w)
  return string.format('%d %d %d %d %d ', w.expiry, w.permits, w.weight, w.since, w.ttl) .. w.meta
end

-- readWaiter reads a waiter record; nil for one that is not.
local function readWaiter(rec)
  local expiry, permits, weight, since, ttl, meta = string.match(rec or '', '^(%d+) (%d+) (%d+) (%d+) (%d+) (.*)$')
  if not expiry then return nil end
  return {expiry = tonumber(expiry), permits = tonumber(permits), weight = tonumber(weight), since = tonumber(since), ttl = tonumber(ttl), meta = meta}
end

-- A turn record, pushed to a waiter's wake list: "g <token> <lease expiry ms>".
local function turnRecord(token, expiry)
  return string.format('g %d %d', token, expiry)
end

-- hmget reads many fields of a hash, a slice at a time (Lua's unpack has a limit).
local function hmget(key, ids)
  local out = {}
  for i = 1, #ids, 500 do
    local part = redis.call('HMGET', key, unpack(ids, i, math.min(i + 499, #ids)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- sweep removes the holders whose lease lapsed and the waiters whose lease
-- lapsed (gone without leaving: killed, host lost), or whose record is not
-- one. It tells whether it removed any, since that can give someone else
-- their turn.
local function sweep()
  local changed = false
  local lapsed = redis.call('ZRANGEBYSCORE', holdersKey, '-inf', now)
  if #lapsed > 0 then
    redis.call('ZREMRANGEBYSCORE', holdersKey, '-inf', now)
    for i = 1, #lapsed, 500 do
      redis.call('HDEL', infoKey, unpack(lapsed, i, math.min(i + 499, #lapsed)))
    end
    changed = true
  end
  local queue = redis.call('ZRANGE', queueKey, 0, -1)
  if #queue > 0 then
    local recs = hmget(waitersKey, queue)
    for i, id in ipairs(queue) do
      local w = readWaiter(recs[i])
      if not w or w.expiry <= now then
        redis.call('ZREM', queueKey, id)
        redis.call('HDEL', waitersKey, id)
        changed = true
      end
    end
  end
  return changed
end

-- used is how many seats the holders take: the sum of their weights; a
-- holder whose record is not one takes one.
local function used()
  local ids = redis.call('ZRANGE', holdersKey, 0, -1)
  local sum = 0
  for _, rec in ipairs(hmget(infoKey, ids)) do
    local h = readHolder(rec)
    sum = sum + (h and h.weight or 1)
  end
  return sum
end

-- ready lists, in order, the waiters whose turn it is, with busy seats
-- taken: walking the line from its head, each waiter that fits beside the
-- holders and the waiters before it, under its own N. The first that does
-- not fit ends the walk, so nobody passes a waiter, however heavy. Each
-- comes as {id, waiter}.
local function ready(busy)
  local out = {}
  local queue = redis.call('ZRANGE', queueKey, 0, -1)
  if #queue == 0 then return out end
  local recs = hmget(waitersKey, queue)
  for i, id in ipairs(queue) do
    local w = readWaiter(recs[i])
    if not w or busy + w.weight > w.permits then break end
    busy = busy + w.weight
    out[#out + 1] = {id, w}
  end
  return out
end

-- wakekey names a waiter's wake list: after a hash of its id, never the id.
local function wakekey(prefix, id)
  return prefix .. ':' .. string.sub(redis.sha1hex(id), 1, 16)
end

-- grant gives id a permit of n seats' capacity, weight seats, for ttl ms,
-- and returns its fencing token. The token is seeded from the server's
-- clock in microseconds, so tokens keep rising even after the keys expired
-- or the store lost its data.
local function grant(id, n, weight, ttl, meta)
  local token = redis.call('INCR', tokenKey)
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token < floor then
    redis.call('SET', tokenKey, floor)
    token = floor
  end
  redis.call('ZADD', holdersKey, now + ttl, id)
  redis.call('HSET', infoKey, id, holderRecord{permits = n, token = token, since = now, weight = weight, meta = meta},
    '#clock', now, '#ttl', math.max(ttl, tonumber(redis.call('HGET', infoKey, '#ttl') or 0)))
  return token
end

-- rebase compares the server's clock with the last reading a script of
-- the key made ('#clock'). Healthy holders renew at least every third of
-- the longest lease asked ('#ttl'), retrying for a sixth more, so a key
-- with holders is touched at least every half of it. A longer silence
-- means that the clock stepped forward, or that every holder stopped
-- renewing (crashed, cut off), and no script can tell which: the holders'
-- leases are pushed back by the silence beyond that half, so that a step
-- does not sweep holders whose commands still run; crashed holders' seats
-- take that much longer to free. A step backwards only makes leases last
-- longer. It returns the ms the holders were pushed back, or minus the ms
-- the clock went back, or 0.
local function rebase()
  local rec = redis.call('HMGET', infoKey, '#clock', '#ttl')
  local last, longest = tonumber(rec[1]), tonumber(rec[2])
  if not last then return 0 end -- no holder yet, or the keys expired
  local moved = 0
  if now < last - 1000 then
    moved = now - last
  elseif longest and now - last > longest / 2 then
    local by = now - last - math.floor(longest / 2)
    local held = redis.call('ZRANGEBYSCORE', holdersKey, string.format('(%d', last), '+inf', 'WITHSCORES')
    for i = 1, #held, 2 do
      redis.call('ZADD', holdersKey, 'XX', tonumber(held[i + 1]) + by, held[i])
    end
    if #held > 0 then moved = by end
  end
  redis.call('HSET', infoKey, '#clock', now)
  return moved
end

-- fenced is how many ms are left of the restart fence: while the server
-- has been up for less than the fence, in whole seconds of uptime (rounded
-- down, so it ends late rather than early), no permit is granted, so that
-- a holder from before a restart that lost its permit has stopped its
-- command before anyone else starts one. The fence also starts anew when
-- the key was last served under another replication id: a replica
-- promoted by a failover, which may lack the latest grants. Its length is
-- the longest any caller of the key asked ('#fencelen'; asked is this
-- caller's), so a release honours it too; '#fence' is when it ends. The
-- server is asked, and '#fence' read, once per script (only this function
-- writes it). A server that does not say its uptime is not fenced.
local fenceEnd = nil
local function fenced(asked)
  if not fenceEnd then
    fenceEnd = tonumber(redis.call('HGET', infoKey, '#fence') or 0)
    local len = tonumber(redis.call('HGET', infoKey, '#fencelen') or 0)
    if asked and asked > len then
      redis.call('HSET', infoKey, '#fencelen', asked)
      len = asked
    end
    if len > 0 then
      -- One section per call: Redis before 7 takes no more. A server that
      -- has no such INFO is not fenced; a user not allowed INFO must hear
      -- of it, not lose the fence in silence.
      local function serverInfo(section)
        local ok, out = pcall(redis.call, 'INFO', section)
        if ok then return true, out end
        local msg = type(out) == 'table' and out.err or tostring(out)
        if string.find(msg, 'NOPERM', 1, true) or string.find(msg, "can't run this command", 1, true) then
          error('NOPERM semrun needs INFO (' .. section .. ') for the restart fence: ' .. msg)
        end
        return false, nil
      end
      local ok, info = serverInfo('server')
      local up = ok and tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
      local left = 0
      if up and up * 1000 < len then left = len - up * 1000 end
      ok, info = serverInfo('replication')
      local replid = ok and string.match(info, 'master_replid:(%x+)')
      if replid then
        local seen = redis.call('HGET', infoKey, '#replid')
        if seen ~= replid then
          if seen then left = len end
          redis.call('HSET', infoKey, '#replid', replid)
        end
      end
      if now + left > fenceEnd then
        fenceEnd = now + left
        redis.call('HSET', infoKey, '#fence', fenceEnd)
      end
    end
  end
  return math.max(fenceEnd - now, 0)
end

-- handoff gives the waiters whose turn it is their permits at once, and
-- pushes each its turn: a waiter starts its command as soon as it reads its
-- list, without asking again. The element stays until read, so none is
-- lost while the waiter is busy; a list whose waiter is gone vanishes
-- within a minute. It returns the longest lease it granted and the seats
-- it gave.
local function handoff(prefix, busy)
  local longest, given = 0, 0
  local turns = ready(busy)
  if #turns == 0 or fenced() > 0 then return longest, given end
  for _, turn in ipairs(turns) do
    local id, w = turn[1], turn[2]
    local k = wakekey(prefix, id)
    -- The wake list first: refused while its slot migrates, it leaves no
    -- grant behind that a retry would not announce.
    redis.call('DEL', k)
    local token = grant(id, w.permits, w.weight, w.ttl, w.meta)
    redis.call('ZREM', queueKey, id)
    redis.call('HDEL', waitersKey, id)
    redis.call('RPUSH', k, turnRecord(token, now + w.ttl))
    redis.call('PEXPIRE', k, 60000)
    longest = math.max(longest, w.ttl)
    given = given + w.weight
  end
  return longest, given
end

-- earliest is how long until the first lease can lapse; 0 with no holder.
local function earliest()
  local first = redis.call('ZRANGE', holdersKey, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return tonumber(first[2]) - now
end

-- keepalive makes every key live at least as long as the longest lease,
-- the restart fence, or ms, and a second more, so an abandoned semaphore
-- vanishes on its own. It never shortens a key's life: a waiter's lease
-- may be the longest.
local function keepalive(ms)
  ms = math.max(ms, fenced()) -- the fence outlives no key that keeps it
  local last = redis.call('ZRANGE', holdersKey, -1, -1, 'WITHSCORES')
  if #last > 0 then ms = math.max(ms, tonumber(last[2]) - now) end
  for _, key in ipairs(KEYS) do
    local left = redis.call('PTTL', key)
    if left == -1 or (left >= 0 and left < ms + 1000) then
      redis.call('PEXPIRE', key, ms + 1000)
    end
  end
end
