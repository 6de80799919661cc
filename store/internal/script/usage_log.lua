-- usage_log: the log's usage (see usage): its rows, and the slot log
-- would reserve for a cost of 1, in its order: the paced limit, the window
-- limits (the log's slot rule, prelude), the feedback, the slow start; the
-- order of the log left out.

-- usage_log(v, now, cost, max_wait, key, fb, pace_key, _, pace, n, w)
-- reads the log at key into v (see usage for the arguments): len, last,
-- rows, paced_row, wait, limit, cause, capped; or returns an error
-- (KEYSTATE).
local function usage_log(v, now, cost, max_wait, key, fb, pace_key, _, pace, n, w)
  local max_w = 0
  for i = 1, #w do max_w = math.max(max_w, w[i]) end
  local rows, len, last = {}, 0, 0
  -- A paced limit alone keeps no log (see log): the log reads as empty.
  if #n > 0 then len = redis.call('LLEN', key) end
  local function at(i)
    local e = tonumber(redis.call('LINDEX', key, i))
    if not e then error({ err = 'KEYSTATE an entry is not a number' }) end
    return math.abs(e)
  end
  -- after(t) counts the entries recorded after t: the log is ordered, so
  -- a bisection finds the first (O(log len) LINDEX, never the whole list).
  local function after(t)
    local lo, hi = 0, len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if at(mid) > t then hi = mid else lo = mid + 1 end
    end
    return len - lo
  end
  local future = after(now)
  for i = 1, #n do
    rows[#rows + 1] = after(now - w[i]) - future
    rows[#rows + 1] = future
    rows[#rows + 1] = 0
  end
  local newest -- the newest entry's time (nil: the log is empty)
  if len > 0 then
    newest = at(len - 1)
    last = newest - now
  end
  local s, limit, cause = now, 0, NONE
  local tat, prow
  if pace then
    local e, bad
    tat, e, bad = pace_slot(pace_key, pace, cost, now, max_wait, max_w)
    if bad then return bad end
    if e > s then s, limit, cause = e, pace.index, LIMIT end
    local k = 0
    if tat and tat > now then
      k = math.floor((tat - now + pace.t - 1) / pace.t)
    elseif not tat and pace.keep > 0 then
      k = pace.burst
    end
    prow = { math.min(k, pace.burst + 1), 0, 0 }
    prow[2] = k - prow[1]
  end
  for i = 1, #n do
    local e, _, bad = log_after(key, newest, n[i], w[i], cost)
    if bad then return bad end
    if e and e > s then
      local j = i -- the limit's index in the request: the paced one sits among them
      if pace and j >= pace.index then j = j + 1 end
      s, limit, cause = e, j, LIMIT
    end
  end
  local bad, till, _, hn, hw, _, pt, pb, _, xm = hold(fb, now, cost)
  if bad then return bad end
  local held = till
  if till >= s then s, limit, cause = till, 0, UPSTREAM end
  if xm and xm > 0 then
    -- A learned margin widens every window limit, as log reserves.
    for i = 1, #n do
      local e, _, bad = log_after(key, newest, n[i], w[i] + xm, cost)
      if bad then return bad end
      if e and e > s then
        local j = i
        if pace and j >= pace.index then j = j + 1 end
        s, limit, cause = e, j, LIMIT
      end
    end
  end
  local max_n = 0
  for i = 1, #n do max_n = math.max(max_n, n[i]) end
  if hn and (hw <= max_w or hn <= max_n) then -- as log counts it
    local e, _, bad = log_after(key, newest, hn, hw, cost)
    if bad then return bad end
    if e and e > s then s, limit, cause = e, 0, LEARNED end
  end
  if pt and (not pace or pt > pace.t or pb < pace.burst) then
    pb = math.max(pb, cost - 1)
    local e
    if pace then
      pace = { t = math.max(pace.t, pt), burst = math.min(pace.burst, pb), index = pace.index, keep = pace.keep }
      if tat then e = tat + (cost - 1 - pace.burst) * pace.t end
    else
      pace = { t = pt, burst = pb, index = 0, keep = 0 }
      local bad
      tat, e, bad = pace_slot(pace_key, pace, cost, now, max_wait, max_w)
      if bad then return bad end
    end
    if e and e > s then s, limit, cause = e, 0, LEARNED end
  end
  if pace and pace.keep > 0 then
    local from = held
    if not tat then from = math.max(from, now) end
    if from > 0 and (not tat or from + pace.burst * pace.t > tat) then
      local e = from + pace.burst * pace.t + (cost - 1 - pace.burst) * pace.t
      if e > s then s, limit, cause = e, pace.index, LIMIT end
    end
  end
  v.len, v.last, v.rows, v.paced_row = len, last, rows, prow
  v.wait, v.limit, v.cause, v.capped = s - now, limit, cause, 0
end
