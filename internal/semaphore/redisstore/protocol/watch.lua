-- watch.lua: ask the first waiter in line to look again when the earliest
-- lease can lapse. A caller whose script handed seats over runs it when a
-- turn was not taken at once: its waiter may be dead, and its claim then
-- lapses with nobody else awake to take the seat back (see handoff).
-- KEYS: see lib.lua. ARGV: wake, the prefix of the key's wake lists.
-- Reply: watched, 1 when a waiter was asked.
local a = args()
if not a.wake then return redis.error_reply('ERR semrun: watch.lua: bad arguments') end
local head = redis.call('ZRANGE', queueKey, 0, 0)[1]
local first = redis.call('ZRANGE', holdersKey, 0, 0, 'WITHSCORES')
local at = first[2] and num(first[2], 0, MAXINT)
if not head or not at then return reply{watched = 0} end
local k = wakekey(a.wake, head)
redis.call('RPUSH', k, string.format('c %d', at))
redis.call('PEXPIRE', k, WAKELIFE)
return reply{watched = 1}
