-- lanes: priority lanes over one log (docs/lanes.md). A request of a higher
-- lane takes the slot a waiter of a lower lane holds when it is earlier
-- than its own; the log is not changed (the slot's entries count in every
-- window as before, only their owner changes), so no window holds more
-- than N.
--
-- idx     a ZSET beside the log (same hash tag): the slots of waiting
--         reservations that a higher lane may take (yield), scored by
--         slot, each named by its member "token:lane:cost:allowance:entry".
-- bumped  a SET beside it: the members whose slot a higher lane took.
--
-- A yielding waiter confirms at its wake-up (held, its member): if its
-- member is not in bumped, it leaves idx and the slot stands (CONFIRMED);
-- if it is, the waiter takes the earliest slot of its own lane or a lower
-- one still waiting in idx (the next in line, which is bumped in turn:
-- FIFO inside a lane holds, each waiter behind a taken slot going one
-- slot later), or a new slot of the log when none is left. A slot nearer
-- than GUARD is never taken: its waiter is about to confirm it. A waiter
-- that confirmed has left idx, so its slot is never taken.

-- The reply's flags: the reservation yields (its member is in idx), its slot
-- was taken from a waiter (the reply has no paced time), it confirmed a
-- held one, or the slot taken was a lower lane's, or a larger tag's taken by
-- a tenant's new request (Reservation.Took; not a bumped waiter's move
-- along its lane or its tags).
local YIELDED, TAKEN, CONFIRMED, TOOK = 1, 2, 4, 8
-- LANE_GUARD is contract.LaneGuard in microseconds; LANE_SCAN bounds the
-- members of idx read to find one that fits; LANE_ALLOWANCE is
-- contract.LaneAllowance in microseconds: the least allowance a yielding
-- reservation is recorded with (when it takes one), so that a higher lane
-- that takes its slot, and must send within that allowance, seldom has to
-- take another for being late.
local LANE_GUARD, LANE_SCAN, LANE_ALLOWANCE = 2000, 16, 5000
-- TENANT_SCAN is LANE_SCAN for a tenant's request (see tenants): the
-- waiters of a backlog are ordered by tag, and a request goes before all
-- those of a larger one; TENANT_FRONT is how many of the first waiters give
-- the virtual time its bound (tenant_v).
local TENANT_SCAN, TENANT_FRONT = 64, 8

-- lane_gap_token(token) is the token of a gap (lane_gap) made from token;
-- lane_is_gap(m) reports whether the member m is a gap's.
local function lane_gap_token(token)
  return 'gap~' .. token
end

local function lane_is_gap(m)
  return string.sub(m, 1, 4) == 'gap~'
end

-- lane_ttl(k, ttl) keeps a TTL of at least ttl ms on k.
local function lane_ttl(k, ttl)
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end

-- lane_member(token, lane, cost, allowance, entry) is the member of a
-- yielding reservation (store.LaneMember builds the same).
local function lane_member(token, lane, cost, allowance, entry)
  return string.format('%s:%.0f:%.0f:%.0f:%.0f', token, lane, cost, allowance, entry)
end

-- lane_find(idx, now, lane, cost, allowance, until_, same, tagged, mine, behind) is the
-- earliest slot in idx, more than LANE_GUARD after now (a tenant's bumped
-- waiter: after now) and at most until_,
-- of a lower lane (or with same, of the same lane too; tagged: of a larger
-- start tag than lane, see tenants), of cost units: its slot, entry and
-- member; nil if none. A new request sends within the slot's allowance (its
-- entry less its slot), whatever its own: it takes the entry, and the time
-- a paced limit counted the slot at. A bumped waiter (same) takes only a
-- slot recorded with an allowance at least its own, else one at the end:
-- taking the next would move every waiter behind it once more. A tenant's
-- request taken again skips its own tenant's slots (a tenant's member's
-- token ends with ';' and its tenant, mine): it would move each of them
-- once more, and alone it would only trade places with them. A bumped
-- waiter of a lane (behind: where it stands in its lane's line, see
-- lane_since) takes a slot of its own lane only from a waiter behind it:
-- two waiters bumped to one slot would otherwise take it from each other
-- at every slot, in a storm that grows with each bump.
local function lane_find(idx, now, lane, cost, allowance, until_, same, tagged, mine, behind)
  local scan, near = LANE_SCAN, now + LANE_GUARD
  if tagged then scan = TENANT_SCAN end
  -- A tenant's bumped waiter, awake at its slot, takes a slot due at once
  -- too: the next of its own tenant may be one (FIFO inside a tenant).
  if tagged and same then near = now end
  local got = redis.call('ZRANGEBYSCORE', idx, string.format('(%.0f', near), string.format('%.0f', until_),
    'WITHSCORES', 'LIMIT', 0, scan)
  local bs, be, bm, bl
  for i = 1, #got, 2 do
    local m, sl = got[i], tonumber(got[i + 1])
    if bs and sl > bs then break end
    local l, c, a, e = string.match(m, ':(%d+):(%d+):(%d+):(%d+)$')
    l, c, a, e = tonumber(l), tonumber(c), tonumber(a), tonumber(e)
    local later
    if tagged then later = l and l > lane else later = l and (l < lane or same and l == lane) end
    if later and mine and string.match(m, '^[^;:]*;([^:]*):') == mine then later = false end
    -- A gap is for its own line alone (lane_gap).
    if later and not (same and l == lane) and lane_is_gap(m) then later = false end
    if later and behind and l == lane then
      local since = tonumber(string.match(m, '^[^=:]*=(%d+):'))
      if since and since <= behind then later = false end
    end
    if later and c == cost and (not same or a >= allowance) then
      if not tagged then return sl, e, m end
      -- Of a tenant's slots due at one time, the largest tag's: the
      -- waiter moved is the last in order.
      if not bl or l > bl then bs, be, bm, bl = sl, e, m, l end
    end
  end
  return bs, be, bm
end

-- lane_rank(m) is the lane, or the start tag, of the member m of idx.
local function lane_rank(m)
  return tonumber(string.match(m, ':(%d+):%d+:%d+:%d+$')) or 0
end

-- tenants: fair shares between the tenants of one key (docs/tenants.md),
-- start-time fair queueing over the same index. A tenant's request has a
-- start tag S = F, F the tenant's last finish tag, when F is past V, the
-- key's virtual time; else (a light tenant) S is just below V: below the
-- stored V, and not above the waiters' smallest tag, so that it goes before
-- the backlog's waiters whose tag is V (ties go to a newcomer) and not before
-- another newcomer's. It moves F to S + step (its cost over its weight). It
-- takes the earliest waiting slot whose start tag is larger than its own,
-- as a higher lane takes a lower one's (rank: its tag); a bumped waiter
-- keeps its tag. A tenant's tags grow, so FIFO inside a tenant holds.
--
-- tens    a ZSET beside the log (same hash tag): the active tenants'
--         finish tags, each under its hashed name, and V under '~v' (no
--         hashed name) (see tenant_v): only tenants whose F is past V
--         are kept, the others dropped in the call that moves V past them.

-- tenant_came(tens, tag) moves the stored V to tag, a confirmed slot's, if
-- later. Only a set that exists (with its TTL) is written: tenant_record
-- makes it.
local function tenant_came(tens, tag)
  local v = tonumber(redis.call('ZSCORE', tens, '~v'))
  if v and v < tag then redis.call('ZADD', tens, string.format('%.0f', tag), '~v') end
end

-- tenant_v(tens, idx, key, now) is the key's virtual time, as it stands
-- now. Stored: the start tag of the latest slot that came (confirmed, or
-- within LANE_GUARD of now in idx); or, when no slot waits beyond the guard
-- and the log's last entry is past (nothing is sent or waits), the largest
-- finish tag: the end of a busy spell, whoever comes next starts afresh,
-- and every tenant is dropped. Returned: that, but never past the smallest
-- tag among the first TENANT_FRONT waiters (a slot that came out of order
-- does not put a newcomer behind the queue); and the stored V.
local function tenant_v(tens, idx, key, now)
  local guard = string.format('%.0f', now + LANE_GUARD)
  local stored = tonumber(redis.call('ZSCORE', tens, '~v'))
  local v = stored or 0
  local front = redis.call('ZRANGEBYSCORE', idx, '(' .. guard, '+inf', 'LIMIT', 0, TENANT_FRONT)
  local last = redis.call('LINDEX', key, -1)
  if front[1] or last and math.abs(tonumber(last) or 0) >= now then
    local came = redis.call('ZREVRANGEBYSCORE', idx, guard, '-inf', 'LIMIT', 0, 1)
    if came[1] then v = math.max(v, lane_rank(came[1])) end
  else
    local top = redis.call('ZREVRANGEBYSCORE', tens, '+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    v = math.max(v, tonumber(top[2]) or 0)
  end
  if stored and stored < v then redis.call('ZADD', tens, string.format('%.0f', v), '~v') end
  local u = v
  for i = 1, #front do v = math.min(v, lane_rank(front[i])) end
  return v, u
end

-- tenant_record(ten, s, ttl) drops the tenants whose finish tag is not
-- past V (their next start is V, as a newcomer's), moves the tenant's to s
-- + its step, stores V if none is, and keeps tens a TTL of ttl ms.
local function tenant_record(ten, s, ttl)
  redis.call('ZREMRANGEBYSCORE', ten.key, '-inf', string.format('%.0f', ten.v))
  redis.call('ZADD', ten.key, string.format('%.0f', s + ten.step), ten.member)
  redis.call('ZADD', ten.key, 'NX', string.format('%.0f', ten.v), '~v')
  lane_ttl(ten.key, ttl)
end

-- lane_since(held) is where the waiter of the member held stands in its
-- lane's line: the slot it first held (its token ends with '=' and it, see
-- contract.LaneToken), kept as it is bumped along the line; nil if none.
local function lane_since(held)
  return tonumber(string.match(held, '^[^=:]*=(%d+):'))
end

-- A gap: when a higher lane takes a lower lane's slot, the line behind it
-- moves one slot on, each waiter at its wake-up onto the next one's slot.
-- The line ends with the waiters queued when the slot was taken: a slot
-- for its last one is reserved at once at the end of the log (a gap), so
-- that the requests that queue after the take go after it, and the moves
-- stop there, rather than run on through every request that keeps joining
-- the queue. A gap is a member of idx with no waiter: its token starts with
-- 'gap~' (lane_gap_token), and it is taken without a bump. One no waiter reaches (the line
-- ended sooner: a waiter gave its slot back) goes unsent.

-- lane_gap(idx, m, token, now, server_wait, key, fb, pace_key, seen, limits,
-- pace, max_w) reserves the gap of the line of m, the member whose slot a
-- higher lane took: a slot at the end of the log, with m's lane, cost and
-- allowance, recorded in idx. Nothing when none comes within a few windows
-- (the line then runs to its end as before).
local function lane_gap(idx, m, token, now, server_wait, key, fb, pace_key, seen, limits, pace, max_w)
  local l, c, a = string.match(m, ':(%d+):(%d+):(%d+):%d+$')
  l, c, a = tonumber(l), tonumber(c), tonumber(a)
  if not l then return end
  local ok, _, sl, _, _, en = log_reserve(now, c, 4 * max_w, server_wait, key, fb, pace_key, seen, a, limits, pace)
  if ok ~= true or sl <= now + LANE_GUARD then return end
  local g = lane_gap_token(token) .. '=' .. string.format('%.0f', sl)
  redis.call('ZADD', idx, sl, lane_member(g, l, c, a, en))
  lane_ttl(idx, math.floor((en - now + max_w) / 1000) + 1)
end

-- lane_yield(idx, token, lane, cost, allowance, slot, entry, now, max_w)
-- records a yielding reservation in idx, drops the slots there that are
-- past (their waiters confirmed, canceled or died: none can be taken), and keeps both keys a
-- TTL past the slot; returns its flag.
local function lane_yield(idx, token, lane, cost, allowance, slot, entry, now, max_w)
  redis.call('ZADD', idx, slot, lane_member(token, lane, cost, allowance, entry))
  redis.call('ZREMRANGEBYSCORE', idx, '-inf', string.format('(%.0f', now))
  lane_ttl(idx, math.floor((entry - now + max_w) / 1000) + 1)
  return YIELDED
end

-- lane_reserve(idx, bumped, lane, yield, token, held, ten, then
-- log_reserve's arguments, without more keys) reserves as log_reserve
-- does, over the lanes (see the header), and returns its values, the flags
-- and a tenant's start tag. ten is nil, or a tenant's request: { key = tens,
-- member = its hashed name, step = its step, again, tag: a retake's } (see
-- tenants), whose rank is its start tag instead of lane.
local function lane_reserve(idx, bumped, lane, yield, token, held, ten,
                            now, cost, max_wait, server_wait, key, fb, pace_key, seen, allowance, limits, pace)
  local UPSTREAM = 3
  local same = false
  if held ~= '' then
    if redis.call('SREM', bumped, held) == 0 then
      redis.call('ZREM', idx, held)
      if ten then tenant_came(ten.key, lane_rank(held)) end
      return true, 0, 0, 0, 0, 0, nil, nil, nil, CONFIRMED
    end
    same = true -- bumped: the next slot of its lane first
    if ten then -- and with its own tag
      lane = lane_rank(held)
      tenant_v(ten.key, idx, key, now)
    end
  elseif ten and ten.again then -- a retake keeps its tag, charged once
    lane = ten.tag
    tenant_v(ten.key, idx, key, now)
  elseif ten then
    local u
    ten.v, u = tenant_v(ten.key, idx, key, now)
    local f = tonumber(redis.call('ZSCORE', ten.key, ten.member))
    if f and f > ten.v then lane = f else lane = math.max(math.min(ten.v, u - 1), 0) end
  end
  local max_w = 0
  for i = 2, #limits, 2 do max_w = math.max(max_w, limits[i]) end
  -- A new tenant's request moves its tenant's tag when it is allowed.
  local rec = ten and not same and not ten.again
  local tag
  if ten then tag = lane end
  local s, e, m
  local mine, since
  if ten and ten.again then mine = ten.member end
  if same and not ten then since = lane_since(held) end
  -- A lane's yielding member's token says where it stands in line: the
  -- slot it first held (kept when bumped).
  local function tok(slot)
    if ten then return token end
    return token .. '=' .. string.format('%.0f', since or slot)
  end
  if lane > 0 or same or ten then
    s, e, m = lane_find(idx, now, lane, cost, allowance, now + max_wait, same, ten ~= nil, mine, since)
  end
  -- From here on, the allowance it is recorded with (contract.YieldAllowance).
  if yield and allowance > 0 then allowance = math.max(allowance, LANE_ALLOWANCE) end
  if s then
    -- Its own slot when not later than the one it would take; and never a
    -- lower lane's slot while a pause holds the key past it.
    local a, w, sl, li, ca, en, tat, sp, mv = log_reserve(now, cost, s - now, math.min(server_wait, s - now), key, fb,
      pace_key, seen, allowance, limits, pace)
    if a == false and ca == UPSTREAM then
      a, w, sl, li, ca, en, tat, sp, mv = log_reserve(now, cost, max_wait, server_wait, key, fb,
        pace_key, seen, allowance, limits, pace)
      s = nil
    end
    if a ~= false then
      local flag = 0
      if a == true and yield and sl > now + LANE_GUARD then
        flag = lane_yield(idx, tok(sl), lane, cost, allowance, sl, en, now, max_w)
      end
      if a == true and rec then tenant_record(ten, tag, math.floor((en - now + max_w) / 1000) + 1) end
      return a, w, sl, li, ca, en, tat, sp, mv, flag, tag
    end
    if s then
      redis.call('ZREM', idx, m)
      if not lane_is_gap(m) then -- a gap has no waiter to bump
        redis.call('SADD', bumped, m)
        lane_ttl(bumped, math.floor((e - now + max_w) / 1000) + 1)
      end
      local flag = TAKEN
      if ten and not same or not ten and lane_rank(m) < lane then
        flag = flag + TOOK
        if not ten then lane_gap(idx, m, token, now, server_wait, key, fb, pace_key, seen, limits, pace, max_w) end
      end
      if yield then flag = flag + lane_yield(idx, tok(s), lane, cost, allowance, s, e, now, max_w) end
      if rec then tenant_record(ten, tag, math.floor((e - now + max_w) / 1000) + 1) end
      return true, s - now, s, 0, 1, e, nil, nil, nil, flag, tag -- cause ORDER: the lane's order set it
    end
    return a, w, sl, li, ca, en, tat, sp, mv, 0, tag
  end
  local a, w, sl, li, ca, en, tat, sp, mv = log_reserve(now, cost, max_wait, server_wait, key, fb, pace_key, seen,
    allowance, limits, pace)
  local flag = 0
  if a == true and yield and sl > now + LANE_GUARD then
    flag = lane_yield(idx, tok(sl), lane, cost, allowance, sl, en, now, max_w)
  end
  if a == true and rec then tenant_record(ten, tag, math.floor((en - now + max_w) / 1000) + 1) end
  return a, w, sl, li, ca, en, tat, sp, mv, flag, tag
end

-- lane_reply(allowed, wait, slot, limit, cause, entry, tat, spacing, moved,
-- flags, tag) is the reply of the lanes' reserve script: every field
-- present (0 for none), then the flags, then for a tenant's request its
-- start tag (0 when refused or confirmed); or an error reply as it is.
local function lane_reply(allowed, wait, slot, limit, cause, entry, tat, spacing, moved, flags, tag)
  if allowed == true then
    return { 1, wait, slot, limit or 0, cause, entry or 0, tat or 0, spacing or 0, moved or 0, flags, tag }
  elseif allowed == false then
    local t
    if tag then t = 0 end
    return { 0, wait, 0, limit or 0, cause, entry or 0, 0, 0, 0, 0, t }
  end
  return allowed
end
