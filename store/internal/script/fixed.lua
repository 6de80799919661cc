-- fixed: the windows of FixedWindow (INCR and EXPIRE per window, with
-- reservations), for counts.
--
-- The slot is the earliest t >= now whose window, in every limit, holds at
-- most N - cost units. A window counts the units reserved in it whatever
-- their time inside it, so reservations in any order keep at most N in every
-- window.
--
-- fixed.lookback: windows before now's that a search still reads
-- (oldestNeeded); fixed.weigh: windows from its own on in which a unit
-- counts (countsUntil).
local fixed = { lookback = 0, weigh = 1 }

-- fixed.within(c, n, w, t, steps, cost) is the earliest time >= t at which
-- the window of the time holds room for cost (fixedFrom), and the steps
-- left.
function fixed.within(c, n, w, t, steps, cost)
  while steps > 0 do
    steps = steps - 1
    local k = idx(t, w)
    if (c[k] or 0) + cost <= n then return t, steps end
    t = (k + 1) * w
  end
  return t, steps
end
