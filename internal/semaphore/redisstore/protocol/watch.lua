-- watch.lua: a turn handed over was not taken at once: its waiter was not
-- blocked on its wake list, so it may be dead, and so may many behind it
-- (a crowd killed together). Two things, so that a crowd costs seconds
-- in all rather than a claim each (a turn not taken is claimed for CLAIM
-- only, see handoff):
-- * the first waiter in line is asked to look again when the earliest
--   lease can lapse, since nobody else may be awake to take the permit back;
-- * a roll call, at most once per ROLLCALL: the first ROLLMAX waiters get
--   a place that lapses within ROLLCALL and are asked to renew it now
--   ("c <now>"), and to look again just after ROLLCALL. A live waiter,
--   blocked on its wake list, asks at once and keeps its place; a dead
--   one leaves the line within ROLLCALL, and the live, looking again then,
--   sweep the dead and are handed their permits, even behind a head of dead
--   waiters that would never look.
-- KEYS: see lib.lua. ARGV: wake, the prefix of the key's wake lists.
-- Reply: watched, 1 when a waiter was asked to look; called, how many
-- waiters the roll call reached.
local a = args()
if not a.wake then return redis.error_reply('ERR semrun: watch.lua: bad arguments') end

local called = 0
local roll = field('#roll', 0, MAXINT)
-- A roll time further ahead than ROLLCALL is a clock that went back.
if not roll or roll <= now or roll > now + ROLLCALL then
  redis.call('HSET', infoKey, '#roll', now + ROLLCALL)
  local by = now + ROLLCALL
  for _, id in ipairs(redis.call('ZRANGE', queueKey, 0, ROLLMAX - 1)) do
    local lease = num(redis.call('ZSCORE', leasesKey, id), 0, MAXINT)
    if lease and lease > by then
      redis.call('ZADD', leasesKey, 'XX', by, id)
      local k = wakekey(a.wake, id)
      -- Now, to keep its place; and again once the dead have left, since
      -- a dead head would not look then and the line would stand still.
      redis.call('RPUSH', k, string.format('c %d', now), string.format('c %d', by + 1))
      redis.call('PEXPIRE', k, WAKELIFE)
      called = called + 1
    end
  end
end

local head = redis.call('ZRANGE', queueKey, 0, 0)[1]
local first = redis.call('ZRANGE', holdersKey, 0, 0, 'WITHSCORES')
local at = first[2] and num(first[2], 0, MAXINT)
if not head or not at then return reply{watched = 0, called = called} end
local k = wakekey(a.wake, head)
redis.call('RPUSH', k, string.format('c %d', at))
redis.call('PEXPIRE', k, WAKELIFE)
return reply{watched = 1, called = called}
