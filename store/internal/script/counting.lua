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

-- feedback(req, n, win) applies hold to limits that allow n[i] units per
-- window of win[i] µs. It returns a refusal verdict or nil; the time the
-- search starts at and its cause; the budget (see spend); and tightened[i],
-- true where a learned limit of ln per lw lowered n[i] (in place) to the
-- same rate, floor(ln * win[i] / lw), at least the cost: it has no
-- counters of its own.
local function feedback(req, n, win)
  local now = req.now
  local start, cause, tightened = now, NONE, {}
  if not req.fb then return nil, start, cause, nil, tightened end
  local refusal, till, budget, ln, lw = hold(req)
  if refusal then return refusal end
  if till > now then start, cause = till, UPSTREAM end
  local max_w = 0
  for i = 1, #win do max_w = math.max(max_w, win[i]) end
  if ln and lw <= max_w then
    for i = 1, #n do
      local m = math.max(math.floor(ln * win[i] / lw), req.cost)
      if m < n[i] then n[i], tightened[i] = m, true end
    end
  end
  return nil, start, cause, budget, tightened
end

-- search(req, start, count, from, cause, tightened, budget) runs earliest
-- from start (see feedback for cause, tightened and budget) and returns a
-- refusal verdict (out of steps, or further than the max wait), or nil and
-- the slot with its wait, limit and cause, spending the budget for a slot
-- before its reset.
local function search(req, start, count, from, cause, tightened, budget)
  local t, limit, capped = earliest(start, count, from)
  if limit > 0 and tightened[limit] then
    limit, cause = 0, LEARNED
  elseif limit > 0 then
    cause = LIMIT
  end
  local wait = t - req.now
  if capped or wait > req.max_wait then return { allowed = false, wait = wait, limit = limit, cause = cause } end
  spend(req, budget, t)
  return nil, t, wait, limit, cause
end
