-- usage_counts: the counting algorithms' usage (see usage): the counters a
-- search from now reads, and the search of counts (or buckets), without
-- recording.

-- bucket_from(ci, ni, pi, bi, t, steps, cost) is store/counters.go's
-- bucketsFrom: the earliest time >= t at which a unit in t's bucket keeps
-- every span of B buckets holding it within N (buckets' search, over the
-- counters ci read at once), and the steps left.
local function bucket_from(ci, ni, pi, bi, t, steps, cost)
  local start = idx(t, pi)
  local hi, sum = start, 0
  for k, v in pairs(ci) do
    if k > hi then hi = k end
    if k > start - bi and k <= start then sum = sum + v end
  end
  local cand, q = start, start
  while steps > 0 do
    steps = steps - 1
    if sum + cost > ni then
      cand = q + 1
    elseif q >= math.min(cand + bi - 1, math.max(cand, hi)) then
      break
    end
    q = q + 1
    sum = sum + (ci[q] or 0) - (ci[q - bi] or 0)
  end
  return math.max(t, cand * pi), steps
end

-- usage_counts(v, now, cost, _, key, fb, _, alg, _, n, w, p, b, within,
-- lookback) reads the counters at key into v (see usage for the
-- arguments): rows, wait, limit, cause, capped, len and last (0); within
-- and lookback are fixed's or counter's, nil for buckets. It returns an
-- error (KEYSTATE).
local function usage_counts(v, now, cost, _, key, fb, _, alg, _, n, w, p, b, within, lookback)
  local bad, start, fcause, _, tightened = feedback(fb, now, cost, n, w)
  if bad then return bad end
  local c = {}
  for i = 1, #n do c[i] = {} end
  -- Each limit's indexes from the first a search from now reads: the
  -- window before now's for counter, the B-1 buckets before for buckets.
  local back = {}
  for i = 1, #n do
    if not within then back[i] = b[i] - 1 else back[i] = lookback end
  end
  local flat = redis.call('HGETALL', key)
  for j = 1, #flat, 2 do
    local i, k = string.match(flat[j], '^(%d+):(%d+)$')
    i, k = tonumber(i), tonumber(k)
    if i and c[i] and k >= idx(now, p[i]) - back[i] then c[i][k] = tonumber(flat[j + 1]) end
  end
  local from
  if not within then
    from = function(i, at, steps) return bucket_from(c[i], n[i], p[i], b[i], at, steps, cost) end
  else
    from = function(i, at, steps) return within(c[i], n[i], w[i], at, steps, cost) end
  end
  local t, lim, out = earliest(start, #n, from)
  local limit, cause, capped = 0, fcause, 0
  if lim > 0 and tightened and tightened[lim] then
    cause = LEARNED
  elseif lim > 0 then
    limit, cause = lim, LIMIT
  end
  if out then capped = 1 end
  local rows = {}
  for i = 1, #n do
    local k = idx(now, p[i])
    local used, later = 0, 0
    for j, units in pairs(c[i]) do
      if j > k then
        later = later + units
      elseif j > k - b[i] then
        used = used + units
      end
    end
    local prev = 0
    if alg == 'counter' then prev = c[i][k - 1] or 0 end
    rows[#rows + 1] = used
    rows[#rows + 1] = later
    rows[#rows + 1] = prev
  end
  v.len, v.last, v.rows = 0, 0, rows
  v.wait, v.limit, v.cause, v.capped = t - now, limit, cause, capped
end
