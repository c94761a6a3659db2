-- status: read one semaphore without changing it. Permit ids are never returned.
-- KEYS[1] holders, KEYS[2] info (see acquire.lua)
-- Returns {now ms, capacity last asked or -1, expiry1, info1, expiry2, info2, ...}
-- for the holders whose lease has not lapsed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {now, tonumber(redis.call('HGET', KEYS[2], '#cap') or -1)}
local holders = redis.call('ZRANGEBYSCORE', KEYS[1], string.format('(%d', now), '+inf', 'WITHSCORES')
for i = 1, #holders, 2 do
  out[#out + 1] = tonumber(holders[i + 1])
  out[#out + 1] = redis.call('HGET', KEYS[2], holders[i]) or ''
end
return out
