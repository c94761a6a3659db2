-- status: read one semaphore without changing it. Permit ids are never returned.
-- KEYS: see lib.lua
-- Returns {now ms, capacity last asked or -1, holders h,
--          expiry1, info1, ..., expiry_h, info_h, waiter record 1, waiter record 2, ...}
-- for the holders and waiters whose lease has not lapsed, waiters in order.
local out = {now, tonumber(redis.call('HGET', KEYS[2], '#cap') or -1), 0}
local holders = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('(%d', now), '+inf', 'WITHSCORES')
for i = 1, #holders, 2 do
  out[#out + 1] = tonumber(holders[i + 1])
  out[#out + 1] = redis.call('HGET', KEYS[2], holders[i]) or ''
  out[3] = out[3] + 1
end
local queue = redis.call('ZRANGE', KEYS[4], 0, -1)
if #queue > 0 then
  for _, rec in ipairs(hmget(KEYS[5], queue)) do
    if rec and tonumber(string.match(rec, '^(%d+)')) > now then out[#out + 1] = rec end
  end
end
return out
