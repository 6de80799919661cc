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

-- The reply's flags: the reservation yields (its member is in idx), it took
-- a lower lane's slot, or it confirmed a held one.
local YIELDED, TOOK, CONFIRMED = 1, 2, 4
-- LANE_GUARD is contract.LaneGuard in microseconds; LANE_SCAN bounds the
-- members of idx read to find one that fits; LANE_ALLOWANCE is
-- contract.LaneAllowance in microseconds: the least allowance a yielding
-- reservation is recorded with (when it takes one), so that a higher lane
-- whose allowance is larger than the yielding waiter's fits in its slot.
local LANE_GUARD, LANE_SCAN, LANE_ALLOWANCE = 2000, 16, 5000

-- lane_ttl(k, ttl) keeps a TTL of at least ttl ms on k.
local function lane_ttl(k, ttl)
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end

-- lane_member(token, lane, cost, allowance, entry) is the member of a
-- yielding reservation (store.LaneMember builds the same).
local function lane_member(token, lane, cost, allowance, entry)
  return string.format('%s:%.0f:%.0f:%.0f:%.0f', token, lane, cost, allowance, entry)
end

-- lane_find(idx, now, lane, cost, allowance, until_, same) is the earliest
-- slot in idx, more than LANE_GUARD after now and at most until_, of a
-- lower lane (or with same, of the same lane too), of cost units, and
-- whose allowance is at least the caller's (the caller sends within its
-- own: by the entry, and by the time a paced limit counted it at): its
-- slot, entry and member; nil if none.
local function lane_find(idx, now, lane, cost, allowance, until_, same)
  local got = redis.call('ZRANGEBYSCORE', idx, string.format('(%.0f', now + LANE_GUARD), string.format('%.0f', until_),
    'WITHSCORES', 'LIMIT', 0, LANE_SCAN)
  for i = 1, #got, 2 do
    local m = got[i]
    local l, c, a, e = string.match(m, ':(%d+):(%d+):(%d+):(%d+)$')
    l, c, a, e = tonumber(l), tonumber(c), tonumber(a), tonumber(e)
    if l and c == cost and (l < lane or same and l == lane) and a >= allowance then return tonumber(got[i + 1]), e, m end
  end
  return nil
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

-- lane_reserve(idx, bumped, lane, yield, token, held, then log_reserve's
-- arguments, without more keys) reserves as log_reserve does, over the lanes (see the header),
-- and returns its values and the flags.
local function lane_reserve(idx, bumped, lane, yield, token, held,
                            now, cost, max_wait, server_wait, key, fb, pace_key, seen, allowance, limits, pace)
  local UPSTREAM = 3
  local same = false
  if held ~= '' then
    if redis.call('SREM', bumped, held) == 0 then
      redis.call('ZREM', idx, held)
      return true, 0, 0, 0, 0, 0, nil, nil, nil, CONFIRMED
    end
    same = true -- bumped: the next slot of its lane first
  end
  local max_w = 0
  for i = 2, #limits, 2 do max_w = math.max(max_w, limits[i]) end
  local s, e, m
  if lane > 0 or same then s, e, m = lane_find(idx, now, lane, cost, allowance, now + max_wait, same) end
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
        flag = lane_yield(idx, token, lane, cost, allowance, sl, en, now, max_w)
      end
      return a, w, sl, li, ca, en, tat, sp, mv, flag
    end
    if s then
      redis.call('ZREM', idx, m)
      redis.call('SADD', bumped, m)
      lane_ttl(bumped, math.floor((e - now + max_w) / 1000) + 1)
      local flag = TOOK
      if yield then flag = flag + lane_yield(idx, token, lane, cost, allowance, s, e, now, max_w) end
      return true, s - now, s, 0, 1, e, nil, nil, nil, flag -- cause ORDER: the lane's order set it
    end
    return a, w, sl, li, ca, en, tat, sp, mv, 0
  end
  local a, w, sl, li, ca, en, tat, sp, mv = log_reserve(now, cost, max_wait, server_wait, key, fb, pace_key, seen,
    allowance, limits, pace)
  local flag = 0
  if a == true and yield and sl > now + LANE_GUARD then
    flag = lane_yield(idx, token, lane, cost, allowance, sl, en, now, max_w)
  end
  return a, w, sl, li, ca, en, tat, sp, mv, flag
end

-- lane_reply(allowed, wait, slot, limit, cause, entry, tat, spacing, moved,
-- flags) is the reply of the lanes' reserve script: every field present
-- (0 for none), the flags last; or an error reply as it is.
local function lane_reply(allowed, wait, slot, limit, cause, entry, tat, spacing, moved, flags)
  if allowed == true then
    return { 1, wait, slot, limit or 0, cause, entry or 0, tat or 0, spacing or 0, moved or 0, flags }
  elseif allowed == false then
    return { 0, wait, 0, limit or 0, cause, entry or 0, 0, 0, 0, 0 }
  end
  return allowed
end
