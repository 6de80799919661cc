-- counter: the windows of SlidingCounter (the weighted previous
-- window, with reservations), for counts.
--
-- At a time t in window j, a limit estimates the units of the sliding window
-- ending at t as prev * (1 - (t - j*W) / W) + cur, from the counts of windows
-- j-1 and j. The slot is the earliest t >= now at which, in every limit, the
-- estimate leaves room for cost and cur + cost + next (the estimate at the
-- start of window j+1, where it is highest) stays within N. A window counts
-- its units whatever their time inside it, so reservations in any order keep
-- every estimate made at an admission within N.

-- counter_within(c, n, w, t, steps, cost) is the earliest time >= t at which
-- the estimate leaves room for cost (counterFrom), and the steps left.
local function counter_within(c, n, w, t, steps, cost)
  while steps > 0 do
    steps = steps - 1
    local j = idx(t, w)
    local prev, cur, nxt = c[j - 1] or 0, c[j] or 0, c[j + 1] or 0
    local room = n - cost - cur
    if room >= 0 and cur + cost + nxt <= n then
      if prev <= room then return t, steps end
      -- prev * (1 - (s - j*W) / W) <= room  <=>  s >= j*W + W * (prev - room) / prev
      local need = j * w + math.ceil(w * (prev - room) / prev)
      if need < (j + 1) * w then return math.max(t, need), steps end
    end
    t = (j + 1) * w
  end
  return t, steps
end

-- The windows of counter, as counts and usage_counts take them beside
-- counter_within: COUNTER_LOOKBACK, how many windows before now's a search still
-- reads (oldestNeeded); COUNTER_WEIGH, in how many windows from its own on a
-- unit counts (countsUntil).
local COUNTER_LOOKBACK, COUNTER_WEIGH = 1, 2
