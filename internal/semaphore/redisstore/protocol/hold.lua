-- hold.lua: a permit kept across processes (semrun acquire). The hold's
-- record is a hash of its own, named after a hash of the permit's member
-- (the hold prefix, ':' and the first 16 hex digits of its SHA-1, in the
-- key's hash slot, as a wake list), that outlives the key's other records
-- by HOLDLIFE so that a release a day later still learns how the hold
-- ended:
--   state held|released|lost|max-runtime|revoked; why, at: its end
--   ttl, fence, replicas, permits, weight, token, meta, bound, cool,
--   slots, names (its slots and their names: see takeSlots and slotNames
--   in lib.lua): its grant
--   '@<share>' -> the lease expiry of one attached process: its keeper
--   ('k.' and a name), a run under its handle
-- The permit's own lease is never shortened: each renewal pushes it to at
-- least now + ttl, so it lasts as long as the longest share. Once the
-- hold has ended, the permit goes back when no live share is left: an end
-- never makes two holders; with a min hold (cool), it stays taken until
-- then, as cooling, as a run's does (see terms in lib.lua). A bounded
-- hold (see bound in lib.lua) is renewed, permit and shares, no further
-- than its bound, and ends as max-runtime there.
-- KEYS: see lib.lua. ARGV (HoldArgs in args.go): op (begin, renew, end);
-- id, the permit id; hold, the prefix of hold records; wake; share, the
-- attached process (renew, end; may be empty for end); begin: ttl, fence,
-- replicas (the min replicas each renewal waits for), meta, bound and
-- cool (ms after the grant; 0: none); end: state and why ('' leaves the
-- state as it is).
-- Reply: state, why, at (ms; 0 when unknown), now (1 when this call ended
-- the hold), permits, weight, token, ttl, replicas, meta, slots, names, released (1 when
-- this call gave the permit back), left (renew: ms left of the share's
-- lease), hard (ms until the hold's bound; 0: none), bad, handed, fresh
-- (see acquire.lua's reply). ARGV quiet: see event in lib.lua.
-- Events: the permit's release (or loss) when the last one out gives it
-- back.
local a = args()
local op, prefix, wake = a.op, a.hold, a.wake
if not (op and a.id and prefix and wake) then
  return redis.error_reply('ERR semrun: hold.lua: bad arguments')
end
local id = member(a.id)
local hk = wakekey(prefix, id)
local out = {state = 'lost', why = '', at = 0, now = 0, permits = 0, weight = 0, token = 0, ttl = 0, replicas = 0, meta = '',
  released = 0, left = 0, hard = 0, bad = bad, handed = handed, fresh = 0}

-- alive is the permit's lease expiry while it has not lapsed, else nil:
-- a permit cooling is given back, and no hold of it comes back.
local function alive()
  local _, _, cooling, claim = terms(id)
  if cooling then return nil end
  local score = (claim[1] and claimed(id, claim)) or num(redis.call('ZSCORE', holdersKey, id), 0, MAXINT)
  if score and score > now then return score end
  return nil
end

if op == 'begin' then
  local ttl, fence, replicas = num(a.ttl, MINTTL, MAXTTL), num(a.fence or '0', 0, MAXTTL), num(a.replicas or '0', 0, MAXREPLICAS)
  local asked, coolFor = num(a.bound or '0', 0, MAXBOUND), num(a.cool or '0', 0, MAXCOOL)
  if not (ttl and fence and replicas and asked and coolFor and a.meta) then
    return redis.error_reply('ERR semrun: hold.lua: bad arguments')
  end
  rebase()
  local h = readHolder(redis.call('HGET', infoKey, id))
  if not alive() or not h or redis.call('EXISTS', hk) == 1 then
    out.why = 'its permit lapsed before it could be kept'
    return reply(out)
  end
  h.meta = a.meta
  redis.call('HSET', infoKey, id, holderRecord(h))
  local hard, minEnd = terms(id)
  hard = recordTerms(id, asked, coolFor, hard, minEnd, h.since)
  if hard then out.hard = hard - now end
  redis.call('HSET', hk, 'state', 'held', 'ttl', ttl, 'fence', fence, 'replicas', replicas, 'permits', h.permits,
    'weight', h.weight, 'token', h.token, 'meta', a.meta, 'bound', asked, 'cool', coolFor,
    'slots', h.slots or '', 'names', slotNames(h.slots) or '')
  redis.call('PEXPIRE', hk, HOLDLIFE)
  -- A min hold recorded here: the keys outlive it (keepalive).
  if coolUntil > now then keepalive(0) end
  out.state, out.permits, out.weight, out.token, out.ttl, out.replicas, out.meta = 'held', h.permits, h.weight, h.token, ttl,
    replicas, a.meta
  out.slots, out.names = h.slots or '', slotNames(h.slots) or ''
  return reply(out)
end

local share = a.share or ''
if (op ~= 'renew' and op ~= 'end') or (op == 'renew' and share == '') or #share > 40 then
  return redis.error_reply('ERR semrun: hold.lua: bad arguments')
end

-- The record, checked: anyone who can write these keys may have written it.
local flat = redis.call('HGETALL', hk)
if #flat == 0 and #a.id == 26 and not string.find(a.id, '[^A-Z2-7]') then
  -- A hold begun by a semrun from before members (see member in lib.lua):
  -- its permit goes by its id, its record by a hash of that. Only an id of
  -- a handle's shape (26 base32 digits) is looked for so, never a member
  -- (40 hex digits) read from the keys; and a record still held whose
  -- permit is not among the holders by that id is none (a hash that
  -- happens to match must not end anyone's hold).
  local old = wakekey(prefix, a.id)
  local was = redis.call('HGETALL', old)
  local held = false
  for i = 1, #was, 2 do
    if was[i] == 'state' then held = was[i + 1] == 'held' end
  end
  if #was > 0 and (not held or redis.call('ZSCORE', holdersKey, a.id)) then
    id, hk, flat = a.id, old, was
  end
end
if #flat == 0 then
  -- No record: a handle no acquire printed here, or one whose hold ended
  -- over a day ago, or the store lost its data.
  out.state, out.why = 'unknown', 'no acquire printed it here, its hold ended over a day ago, or the store lost its data'
  return reply(out)
elseif #flat > 2 * (MAXSHARES + 16) then
  out.why = 'the store has no such hold: its record is not one'
  return reply(out)
end
local rec, shares = {}, {}
for i = 1, #flat, 2 do
  local f = flat[i]
  if string.sub(f, 1, 1) == '@' then
    shares[string.sub(f, 2)] = num(flat[i + 1], 0, MAXINT) or 0
  else
    rec[f] = flat[i + 1]
  end
end
local ttl, fence, replicas = num(rec.ttl, MINTTL, MAXTTL), num(rec.fence or '0', 0, MAXTTL), num(rec.replicas or '0', 0, MAXREPLICAS)
local permits, weight = num(rec.permits, 1, MAXPERMITS), num(rec.weight, 1, MAXPERMITS)
local asked = num(rec.bound or '0', 0, MAXBOUND) or 0
local coolFor = num(rec.cool or '0', 0, MAXCOOL) or 0
local token = num(rec.token, 1, MAXINT)
local states = {held = true, released = true, lost = true, ['max-runtime'] = true, revoked = true}
if not (ttl and fence and replicas and permits and weight and token and states[rec.state]) or weight > permits then
  dropped('hold', rec.state)
  out.why = 'the store has no such hold: its record is not one'
  return reply(out)
end
out.permits, out.weight, out.token, out.ttl, out.replicas, out.meta = permits, weight, token, ttl, replicas, rec.meta or ''
out.slots, out.names = rec.slots or '', rec.names or ''
local moved, last = rebase()
if moved > 0 then
  -- The shares' leases are pushed back as the holders' are (see rebase):
  -- a silence the key cannot tell from a clock step must not end a run's
  -- share while its command may still run.
  for s, exp in pairs(shares) do
    if exp > last then
      shares[s] = math.min(exp + moved, now + ttl)
      redis.call('HSET', hk, '@' .. s, shares[s])
    end
  end
end

-- ended records the hold's end, once: the first end counts.
local function ended(state, why, at)
  redis.call('HSET', hk, 'state', state, 'why', string.sub(why, 1, MAXWHY), 'at', at)
  rec.state, rec.why, rec.at = state, why, at
end

local score = alive()
local hard = nil
if rec.state == 'held' then
  local minEnd
  hard, minEnd = terms(id)
  hard = recordTerms(id, asked, coolFor, hard, minEnd)
end
if hard then out.hard = math.max(hard - now, 0) end
local revoked = rec.state == 'held' and revokedMark(id)
if revoked then
  -- An operator revoked it: its runs stop, and the permit lapses.
  local reason = string.match(revoked, '^%d+ (.*)$') or ''
  ended('revoked', reason == '' and 'an operator revoked it' or 'an operator revoked it: ' .. reason, now)
elseif rec.state == 'held' and hard and hard <= now then
  -- Nothing kept it longer than its bound: the keeper stopped, hung or
  -- is old.
  ended('max-runtime', 'its --max-runtime ran out, and the store would renew it no further', hard)
elseif rec.state == 'held' and not score then
  -- Nobody renewed it in time: its keeper died, or was cut off.
  local lapsed = num(redis.call('ZSCORE', holdersKey, id), 0, MAXINT)
  ended('lost', 'its lease lapsed: no keeper or run renewed it', lapsed or 0)
end

if op == 'renew' then
  if rec.state == 'held' then
    local n = 0
    for s, exp in pairs(shares) do
      if exp <= now then redis.call('HDEL', hk, '@' .. s) elseif s ~= share then n = n + 1 end
    end
    if n >= MAXSHARES then
      return redis.error_reply('SHARELIMIT ' .. MAXSHARES .. ' processes are attached to this hold already')
    end
    local expiry = now + ttl
    if hard then expiry = math.min(expiry, hard) end
    redis.call('ZADD', holdersKey, 'XX', math.max(score, expiry), id)
    redis.call('HSET', hk, '@' .. share, expiry)
    out.left = expiry - now
    remember(fence, ttl, ttl)
    keepalive(ttl)
  elseif moved > 0 then
    keepalive(0)
  end
  redis.call('PEXPIRE', hk, HOLDLIFE)
else
  local state, why = a.state or '', a.why or ''
  if state ~= '' and rec.state == 'held' then
    if not states[state] or state == 'held' then
      return redis.error_reply('ERR semrun: hold.lua: bad arguments')
    end
    ended(state, why, now)
    out.now = 1
  end
  if share ~= '' then
    redis.call('HDEL', hk, '@' .. share)
    shares[share] = nil
  end
  if rec.state ~= 'held' then
    -- A keeper ('k.' shares) runs no command: only runs hold the permit
    -- of an ended hold until they let go.
    local live = false
    for s, exp in pairs(shares) do
      if exp > now and string.sub(s, 1, 2) ~= 'k.' then live = true end
    end
    -- The last one out gives the permit back, as release.lua does: a
    -- release, or a loss when its lease lapsed; with a min hold that has
    -- not passed, as cooling until then (no one command's exit status),
    -- and a cooling already is left as it is.
    local at = redis.call('ZSCORE', holdersKey, id)
    local _, minEnd, cooled = terms(id)
    if not live and at and minEnd and minEnd > now then
      if not cooled then
        cool(id, minEnd, -1)
        keepalive(0)
        if score then
          released(id, readHolder(redis.call('HGET', infoKey, id)), -1, minEnd - now)
        else
          lost(id, nil, tonumber(at) or now)
        end
      end
      out.released = 1
    elseif not live and at then
      local h
      h, cooled = removeHolder(id)
      if not cooled and score then
        released(id, h, -1, 0)
      elseif not cooled then
        lost(id, h, tonumber(at) or now)
      end
      out.released = 1
      sweep(wake)
      local longest = handoff(wake, used())
      if longest > 0 then keepalive(longest) end
    end
  end
  if moved > 0 then keepalive(0) end
  redis.call('PEXPIRE', hk, HOLDLIFE)
end
out.state, out.why, out.at = rec.state, string.sub(rec.why or '', 1, MAXWHY), num(rec.at or '0', 0, MAXINT) or 0
out.fresh = fresh
return reply(out)
