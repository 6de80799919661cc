-- fixed: the windows of FixedWindow (INCR and EXPIRE per window, with
-- reservations), for counts.
--
-- The slot is the earliest t >= now whose window, in every limit, holds at
-- most N - cost units. A window counts the units reserved in it whatever
-- their time inside it, so reservations in any order keep at most N in every
-- window.

-- fixed_within(c, n, w, t, steps, cost) is the earliest time >= t at which
-- the window of the time holds room for cost (fixedFrom), and the steps
-- left.
local function fixed_within(c, n, w, t, steps, cost)
  while steps > 0 do
    steps = steps - 1
    local k = idx(t, w)
    if (c[k] or 0) + cost <= n then return t, steps end
    t = (k + 1) * w
  end
  return t, steps
end

-- The windows of fixed, as counts and usage_counts take them beside
-- fixed_within: FIXED_LOOKBACK, how many windows before now's a search still
-- reads (oldestNeeded); FIXED_WEIGH, in how many windows from its own on a
-- unit counts (countsUntil).
local FIXED_LOOKBACK, FIXED_WEIGH = 0, 1
