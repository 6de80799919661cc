-- counting: what the counting algorithms (fixed, counter, buckets) share.
-- store/counters.go is the reference they follow step for step, so that the
-- Memory store and the Redis store give the same answers.
--
-- Like the log, a counter reserves the future: the slot is the earliest time
-- t >= now at which every limit admits the cost, and the cost is added to
-- the counters of t. The search walks forward, limit by limit, until none
-- moves t; a budget of steps bounds it (a search that would need more is
-- refused).

-- earliest(t, count, from) is the earliest time >= t at which from(i, t,
-- steps) returns t for every limit i in 1..count, the limit that last moved
-- it (0: none), and whether the search ran out of steps. from returns the
-- earliest time >= t limit i allows and the steps it left of those it was
-- given (each window or bucket it looks at takes one).
local function earliest(t, count, from)
  local limit, steps = 0, 100000
  while true do
    local moved = false
    for i = 1, count do
      local ti
      ti, steps = from(i, t, steps)
      if ti > t then t, limit, moved = ti, i, true end
    end
    if steps <= 0 then return t, limit, true end
    if not moved then return t, limit, false end
  end
end

-- feedback(fb, now, cost, n, win) applies hold (the hash fb, nil for none)
-- to a request of cost units at now under limits that allow n[i] units per
-- window of win[i] µs. It returns the error KEYSTATE or nil; the time the
-- search starts at (a reservation is refused, UPSTREAM, when it lies
-- further than its max server wait) and its cause; the budget (see
-- spend); and tightened[i], true where a learned limit of ln per lw lowered
-- n[i] (in place) to the same rate, floor(ln * win[i] / lw), at least the
-- cost: it has no counters of its own (tightened is nil when no learned
-- limit holds: a table less on the common path).
local function feedback(fb, now, cost, n, win)
  local start, cause, tightened = now, NONE, nil
  if not fb then return nil, start, cause, nil, nil end
  local bad, till, budget, ln, lw = hold(fb, now, cost)
  if bad then return bad end
  if till > now then start, cause = till, UPSTREAM end
  if ln then
    local max_w = 0
    for i = 1, #win do max_w = math.max(max_w, win[i]) end
    if lw <= max_w then
      tightened = {}
      for i = 1, #n do
        local m = math.max(math.floor(ln * win[i] / lw), cost)
        if m < n[i] then n[i], tightened[i] = m, true end
      end
    end
  end
  return nil, start, cause, budget, tightened
end

-- search(now, cost, max_wait, fb, start, count, from, cause, tightened,
-- budget) runs earliest from start (see feedback for cause, tightened and
-- budget) and returns the slot with its wait, limit and cause, and whether
-- it is refused (out of steps, or further than the max wait); it spends the
-- budget in fb for a slot before its reset.
local function search(now, cost, max_wait, fb, start, count, from, cause, tightened, budget)
  local t, limit, capped = earliest(start, count, from)
  if limit > 0 and tightened and tightened[limit] then
    limit, cause = 0, LEARNED
  elseif limit > 0 then
    cause = LIMIT
  end
  local wait = t - now
  if capped or wait > max_wait then return t, wait, limit, cause, true end
  spend(fb, cost, budget, t)
  return t, wait, limit, cause, false
end
