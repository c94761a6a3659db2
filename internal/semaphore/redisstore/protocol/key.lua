-- key.lua: what an operator does to a key (semrun key): its settings in
-- the policy key, which never expires and which only operators write, and
-- revokes.
-- KEYS: see lib.lua. ARGV (KeyArgs in args.go): op, one of
--   set      cap: the stored capacity every caller is admitted against
--   slots    names: the slots' names, comma-separated, slot 0's first;
--            their number is stored as the capacity (see slotNames in
--            lib.lua); set and unset drop them
--   unset    back to each caller's own
--   age      for: the priority age the line orders waiters by, ms (0:
--            unset; see place in lib.lua)
--   pause    reason; for, ms (0: until resumed)
--   resume
--   revoke   holder, a holder's public id (publicID); reason; force: 1
--            frees its permit at once (a holder known to be dead); a
--            cooling with that id ends at once
-- and wake, the prefix of the key's wake lists; quiet (see event in
-- lib.lua).
-- Reply: found (revoke: 1 when a holder has that id), stored, paused,
-- reason, pausedfor (as status.lua's, after the op), bad, handed, fresh
-- (see acquire.lua's reply).
-- Events: each op's (capacity, pause, resume, revoke).
-- A resume, a higher capacity or a forced revoke hands the permits that
-- frees to the line at once.
local a = args()
local op, wake = a.op, a.wake
local reason = a.reason or ''
if not (op and wake) or #reason > MAXREASON then
  return redis.error_reply('ERR semrun: key.lua: bad arguments')
end
local found = 0
-- As every script that sweeps: a silence must not sweep holders whose
-- commands still run (see rebase).
local moved = rebase()
-- A policy that is no hash (someone else wrote it) holds no settings:
-- it makes way for the operator's.
if not pcall(redis.call, 'HGET', policyKey, 'cap') then
  redis.call('DEL', policyKey)
end
-- Revokes are kept for as long as the revoked holder's lease may last.
local function pruneRevoked()
  local flat = redis.call('HGETALL', policyKey)
  for i = 1, #flat, 2 do
    if string.sub(flat[i], 1, 8) == 'revoked ' then
      local at = num(string.match(flat[i + 1], '^(%d+) '), 0, MAXINT)
      if not at or at + 2 * MAXTTL < now then redis.call('HDEL', policyKey, flat[i]) end
    end
  end
end

-- unname drops the names of the key's slots.
local function unname()
  local count = num(redis.call('HGET', policyKey, 'slots'), 1, MAXSLOTS)
  local fields = {'slots'}
  for n = 0, (count or 0) - 1 do fields[#fields + 1] = 'name ' .. n end
  redis.call('HDEL', policyKey, unpack(fields))
end

if op == 'set' then
  local cap = num(a.cap, 1, MAXPERMITS)
  if not cap then return redis.error_reply('ERR semrun: key.lua: bad arguments') end
  unname()
  redis.call('HSET', policyKey, 'cap', cap)
  event({e = 'capacity', cap = cap})
elseif op == 'slots' then
  local names = {}
  for name in string.gmatch((a.names or '') .. ',', '([^,]*),') do
    if name == '' or #name > MAXSLOTNAME then return redis.error_reply('ERR semrun: key.lua: bad arguments') end
    names[#names + 1] = name
  end
  if #names < 1 or #names > MAXSLOTS then return redis.error_reply('ERR semrun: key.lua: bad arguments') end
  unname()
  local fields = {'cap', #names, 'slots', #names}
  for i, name in ipairs(names) do fields[#fields + 1], fields[#fields + 2] = 'name ' .. (i - 1), name end
  redis.call('HSET', policyKey, unpack(fields))
  event({e = 'capacity', cap = #names, why = string.sub(a.names, 1, MAXREASON)})
elseif op == 'age' then
  local d = num(a['for'] or '0', 0, MAXAGE)
  if not d then return redis.error_reply('ERR semrun: key.lua: bad arguments') end
  if d > 0 then
    redis.call('HSET', policyKey, 'age', d)
  else
    redis.call('HDEL', policyKey, 'age')
  end
  event({e = 'priority-age', ['until'] = d})
elseif op == 'unset' then
  unname()
  redis.call('HDEL', policyKey, 'cap')
  event({e = 'capacity', cap = '0'})
elseif op == 'pause' then
  local d = num(a['for'] or '0', 0, MAXPAUSE)
  if not d then return redis.error_reply('ERR semrun: key.lua: bad arguments') end
  redis.call('HSET', policyKey, 'paused', 1, 'until', d > 0 and now + d or 0, 'reason', reason)
  event({e = 'pause', why = reason, ['until'] = d})
elseif op == 'resume' then
  redis.call('HDEL', policyKey, 'paused', 'until', 'reason')
  event({e = 'resume'})
elseif op == 'revoke' then
  local pub = a.holder or ''
  if not string.match(pub, '^%x+$') or #pub ~= 10 then
    return redis.error_reply('ERR semrun: key.lua: bad arguments')
  end
  -- Rare, and an operator's: the holders are walked to find it.
  local ids = redis.call('ZRANGE', holdersKey, 0, -1)
  for _, id in ipairs(ids) do
    if publicID(id) == pub then
      found = 1
      if select(3, terms(id)) then
        -- A cooling: no process holds it, so it ends at once.
        local h = removeHolder(id)
        event(holderEvent('revoke', id, h, {why = reason, f = '1'}))
        break
      end
      pruneRevoked()
      if a.force ~= '1' and redis.call('HGET', policyKey, 'revoked ' .. pub) then
        -- Revoked already: one revoke, whose reason the holder hears.
        break
      end
      redis.call('HSET', policyKey, 'revoked ' .. pub, string.format('%d ', now) .. reason)
      local h
      if a.force == '1' then
        h = removeHolder(id)
        -- A turn its waiter has not read yet goes too, as the sweep's does:
        -- read later, it would start a command on a permit, and slot, given on.
        redis.call('DEL', wakekey(wake, id))
      else
        h = readHolder(redis.call('HGET', infoKey, id))
      end
      event(holderEvent('revoke', id, h, {why = reason, f = a.force == '1' and '1' or ''}))
      break
    end
  end
else
  return redis.error_reply('ERR semrun: key.lua: bad arguments')
end
policyRead = nil -- read anew, as this op left it
local longest = 0
if op ~= 'pause' then
  sweep(wake)
  longest = handoff(wake, used())
end
keepalive(longest)
if moved > 0 then keepalive(0) end
local p = policy()
return reply{found = found, stored = p.cap or 0, paused = p.paused and 1 or 0, reason = p.paused and p.paused.reason or '',
  pausedfor = p.paused and p.paused.left or 0, bad = bad, handed = handed, fresh = fresh}
