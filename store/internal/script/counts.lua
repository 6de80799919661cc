-- counts: the body of FixedWindow and SlidingCounter, which differ only in
-- their windows (fixed or counter, above).
--
-- key       a HASH of counters: field "<i>:<k>" holds the units admitted in
--           window k = floor(t / W_i) of limit i (1-based), that is in
--           [k*W_i, (k+1)*W_i) microseconds.
-- fb        optional: the key's feedback (see hold and feedback).
-- limits    the limits, as pairs: N (integer >= 1), W (window in microseconds >= 1).
--
-- Returns the values of request's reserve_reply, without entry.

-- counts_reserve(now, cost, max_wait, server_wait, key, fb, limits, within,
-- lookback, weigh) reserves the request's slot (the arguments as
-- parse_request returns them) under the windows of fixed or counter (their
-- within, LOOKBACK and WEIGH).
local function counts_reserve(now, cost, max_wait, server_wait, key, fb, limits, within, lookback, weigh)
  local n, w = {}, {}
  for i = 1, #limits, 2 do
    n[#n + 1] = limits[i]
    w[#w + 1] = limits[i + 1]
  end
  local bad, start, cause, budget, tightened = feedback(fb, now, cost, n, w)
  if bad then return bad end
  if start - now > server_wait then return false, start - now, nil, 0, cause end -- UPSTREAM

  -- Load the counters; windows older than the first a search from now reads
  -- (and limits this call does not have) are never read again, and go
  -- (stale: their fields, a table made only when there are some).
  local c, stale = {}, nil
  for i = 1, #n do c[i] = {} end
  local flat = redis.call('HGETALL', key)
  for j = 1, #flat, 2 do
    local i, k = string.match(flat[j], '^(%d+):(%d+)$')
    i, k = tonumber(i), tonumber(k)
    if i and c[i] and k >= idx(now, w[i]) - lookback then
      c[i][k] = tonumber(flat[j + 1])
    else
      if not stale then stale = {} end
      stale[#stale + 1] = flat[j]
    end
  end
  if stale then
    for j = 1, #stale, 1000 do
      redis.call('HDEL', key, unpack(stale, j, math.min(j + 999, #stale)))
    end
  end

  local function from(i, at, steps) return within(c[i], n[i], w[i], at, steps, cost) end
  local t, wait, limit, refused
  t, wait, limit, cause, refused = search(now, cost, max_wait, fb, start, #n, from, cause, tightened, budget)
  if refused then return false, wait, nil, limit, cause end

  -- Count the units, and keep the hash until the last window that weighs
  -- them ends.
  local till = 0
  for i = 1, #n do
    local k = idx(t, w[i])
    redis.call('HINCRBY', key, i .. ':' .. string.format('%.0f', k), cost)
    till = math.max(till, (k + weigh) * w[i])
  end
  expire(key, till, now)
  return true, wait, t, limit, cause
end
