-- acquire: sweep lapsed holders and waiters, then grant a permit when it is
-- the caller's turn: nobody waits and its weight fits under N, or it waits
-- and every waiter before it fits too. Otherwise, unless it will not wait,
-- the caller gets, or keeps, its place in line, with a lease of its own.
-- KEYS: see lib.lua
-- ARGV[1] permit id, ARGV[2] capacity N, ARGV[3] lease ms, ARGV[4] meta,
-- ARGV[5] weight, ARGV[6] waiter lease ms (0: do not wait), ARGV[7] wake list prefix
-- Returns {granted 0|1, token, seats taken, previous capacity asked,
--          ms until the earliest lease lapses, place in line (1 first; 0 not in line), waiters}.
-- Running it twice with the same permit id (a client retry) grants once and returns the same token.
local id, n, ttl, meta = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local weight, wlease, channel = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]

local changed = sweep()
local prev = tonumber(redis.call('HGET', KEYS[2], '#cap') or n)
local busy = used()

local mine = redis.call('HGET', KEYS[2], id)
if mine and redis.call('ZSCORE', KEYS[1], id) then
  local token = tonumber(string.match(mine, '^%d+ (%d+) '))
  return {1, token, busy, prev, earliest(), 0, redis.call('ZCARD', KEYS[4])}
end

local inline = redis.call('ZSCORE', KEYS[4], id)
local turn = false
if inline then
  for _, w in ipairs(ready(busy)) do
    if w == id then turn = true break end
  end
else
  turn = redis.call('ZCARD', KEYS[4]) == 0 and busy + weight <= n
end

if turn then
  -- Seeded from the server's clock in microseconds, so tokens keep rising
  -- even after the keys expired or the store lost its data.
  local token = redis.call('INCR', KEYS[3])
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if token < floor then
    redis.call('SET', KEYS[3], floor)
    token = floor
  end
  redis.call('ZADD', KEYS[1], now + ttl, id)
  redis.call('HSET', KEYS[2], id, string.format('%d %d %d %d ', n, token, now, weight) .. meta, '#cap', n)
  if inline then
    redis.call('ZREM', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('DEL', wakekey(channel, id))
  end
  keepalive(ttl)
  if changed then wake(channel, busy + weight, id) end
  return {1, token, busy + weight, prev, earliest(), 0, redis.call('ZCARD', KEYS[4])}
end

redis.call('HSET', KEYS[2], '#cap', n)
if wlease == 0 then
  if changed then wake(channel, busy, id) end
  return {0, 0, busy, prev, earliest(), 0, redis.call('ZCARD', KEYS[4])}
end

local since = now
if inline then
  since = tonumber(string.match(redis.call('HGET', KEYS[5], id) or '', '^%d+ %d+ %d+ (%d+) ') or now)
else
  redis.call('ZADD', KEYS[4], redis.call('HINCRBY', KEYS[5], '#seq', 1), id)
end
redis.call('HSET', KEYS[5], id, string.format('%d %d %d %d ', now + wlease, n, weight, since) .. meta)
keepalive(math.max(ttl, wlease))
if changed then wake(channel, busy, id) end
return {0, 0, busy, prev, earliest(), redis.call('ZRANK', KEYS[4], id) + 1, redis.call('ZCARD', KEYS[4])}
