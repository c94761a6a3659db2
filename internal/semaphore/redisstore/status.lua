-- status.lua: read one semaphore without changing it. Permit ids are never
-- returned.
-- KEYS: see lib.lua. No ARGV.
-- Reply (statusReply in scripts.go), for the holders and waiters whose
-- lease has not lapsed:
--   now       the server's clock, ms
--   capacity  the capacity the latest caller asked, or -1
--   holders   {lease expiry ms, holder record} each
--   waiters   the waiter records, in line
local holders = {}
local held = redis.call('ZRANGEBYSCORE', holdersKey, string.format('(%d', now), '+inf', 'WITHSCORES')
for i = 1, #held, 2 do
  holders[#holders + 1] = {tonumber(held[i + 1]), redis.call('HGET', infoKey, held[i]) or ''}
end
local waiters = {}
local queue = redis.call('ZRANGE', queueKey, 0, -1)
if #queue > 0 then
  for _, rec in ipairs(hmget(waitersKey, queue)) do
    local w = readWaiter(rec)
    if w and w.expiry > now then waiters[#waiters + 1] = rec end
  end
end
return reply{now = now, capacity = tonumber(redis.call('HGET', infoKey, '#cap') or -1), holders = holders, waiters = waiters}
