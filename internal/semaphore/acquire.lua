-- acquire: sweep lapsed holders and waiters, handing their seats to the
-- waiters whose turn that makes, then grant a permit when it is the
-- caller's turn: nobody waits and its weight fits under N, or it was
-- handed one. Otherwise, unless it will not wait, the caller gets, or
-- keeps, its place in line, with a lease of its own.
-- KEYS: see lib.lua
-- ARGV[1] permit id, ARGV[2] capacity N, ARGV[3] lease ms, ARGV[4] meta,
-- ARGV[5] weight, ARGV[6] waiter lease ms (0: do not wait), ARGV[7] wake list prefix,
-- ARGV[8] restart fence ms (0 or none: no fence): while the server has been up for less,
--         nobody is granted a permit, the caller included.
-- Returns {granted 0|1, token, seats taken, previous capacity asked,
--          ms until the earliest lease lapses (or, while fenced, until the fence ends),
--          place in line (1 first; 0 not in line), waiters,
--          the server's clock in ms, ms left of the caller's lease (0 when not granted),
--          ms left of the restart fence,
--          ms the holders' leases were pushed back (negative: ms the clock went back; see rebase)}.
-- Running it twice with the same permit id (a client retry, or a waiter
-- that asks after it was handed its permit) grants once and returns the same token.
local id, n, ttl, meta = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local weight, wlease, channel = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]

local prev = tonumber(redis.call('HGET', KEYS[2], '#cap') or n)

fenced(tonumber(ARGV[8] or 0) or 0) -- sets the fence up, see lib.lua

-- wakeIn is when a waiter should ask again at the latest: when the fence
-- ends, or else when the earliest lease can lapse.
local function wakeIn()
  local f = fenced()
  if f > 0 then return f end
  return earliest()
end

-- record keeps the caller's place in line with a fresh waiter lease.
local function record(since)
  redis.call('HSET', KEYS[5], id, string.format('%d %d %d %d %d ', now + wlease, n, weight, since, ttl) .. meta)
end

local moved = rebase()
local longest = 0
local changed = sweep()
local busy = used()
local inline = redis.call('ZSCORE', KEYS[4], id)
if inline and wlease > 0 then
  -- Rewritten first: a record an older semrun wrote says no ttl, and the
  -- handoff below can only give a permit to a record that does.
  record(tonumber(string.match(redis.call('HGET', KEYS[5], id) or '', '^%d+ %d+ %d+ (%d+) ') or now))
end
-- A waiter that asks again runs the handoff too: a turn that an older
-- semrun's script only announced is taken here.
if changed or inline then
  local given
  longest, given = handoff(channel, busy, '')
  busy = busy + given
end

local mine = redis.call('HGET', KEYS[2], id)
local expiry = redis.call('ZSCORE', KEYS[1], id)
if mine and expiry then
  local token = tonumber(string.match(mine, '^%d+ (%d+) '))
  redis.call('DEL', wakekey(channel, id))
  redis.call('HSET', KEYS[2], '#cap', n)
  keepalive(longest)
  return {1, token, busy, prev, earliest(), 0, redis.call('ZCARD', KEYS[4]), now, tonumber(expiry) - now, fenced(), moved}
end

redis.call('HSET', KEYS[2], '#cap', n)
if not inline and redis.call('ZCARD', KEYS[4]) == 0 and busy + weight <= n and fenced() == 0 then
  local token = grant(id, n, weight, ttl, meta)
  keepalive(math.max(ttl, longest))
  return {1, token, busy + weight, prev, earliest(), 0, 0, now, ttl, 0, moved}
end

if wlease == 0 then
  keepalive(longest)
  return {0, 0, busy, prev, wakeIn(), 0, redis.call('ZCARD', KEYS[4]), now, 0, fenced(), moved}
end

if not inline then
  redis.call('ZADD', KEYS[4], redis.call('HINCRBY', KEYS[5], '#seq', 1), id)
  record(now)
  -- A permit handed over before, which lapsed unused, left its grant there.
  redis.call('DEL', wakekey(channel, id))
end
keepalive(math.max(ttl, wlease, longest))
return {0, 0, busy, prev, wakeIn(), redis.call('ZRANK', KEYS[4], id) + 1, redis.call('ZCARD', KEYS[4]), now, 0, fenced(), moved}
