-- release: give this holder's permit back. Releasing twice is harmless.
-- KEYS[1] holders, KEYS[2] info (see acquire.lua)
-- ARGV[1] permit id
-- Returns 1 when the permit was held, 0 when it was already gone.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return removed
