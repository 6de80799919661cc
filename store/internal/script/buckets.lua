-- buckets: the body of Buckets: reserve the earliest send time under
-- precision buckets (several [duration, limit, precision] limits, with
-- reservations).
--
-- key       a HASH of counters: field "<i>:<k>" holds the units admitted in
--           bucket k = floor(t / P_i) of limit i (1-based), that is in
--           [k*P_i, (k+1)*P_i) microseconds.
-- fb        optional: the key's feedback (see hold and feedback); a learned
--           limit tightens N with the window P * B.
-- limits    the limits, as triples: N (integer >= 1), P (bucket length in
--           microseconds >= 1), B (buckets per window: ceil(W / P), >= 1).
--
-- Returns the values of request's reserve_reply, without entry.
--
-- A limit counts, at a time in bucket q, the units of the B buckets q-B+1..q.
-- The slot is the earliest t >= now such that, in every limit, a unit in t's
-- bucket p keeps every such span that contains p (those ending at p..p+B-1)
-- within N. A bucket counts its units whatever their time inside it, so
-- reservations in any order keep every span within N.
-- store/counters.go is the reference these steps follow (bucketsFrom, earliest).

-- bucket_field is the field of bucket k of limit i.
local function bucket_field(i, k) return i .. ':' .. string.format('%.0f', k) end

-- buckets_reserve(now, cost, max_wait, server_wait, key, fb, limits)
-- reserves the request's slot (the arguments as parse_request returns them)
-- under its buckets.
local function buckets_reserve(now, cost, max_wait, server_wait, key, fb, limits)
  local n, p, b, win = {}, {}, {}, {}
  for i = 1, #limits, 3 do
    n[#n + 1] = limits[i]
    p[#p + 1] = limits[i + 1]
    b[#b + 1] = limits[i + 2]
    win[#win + 1] = p[#p] * b[#b]
  end
  local bad, start, cause, budget, tightened = feedback(fb, now, cost, n, win)
  if bad then return bad end
  if start - now > server_wait then return false, start - now, nil, 0, cause end -- UPSTREAM

  -- Besides its buckets, each limit keeps three fields: "<i>:t" the total of
  -- its buckets present, "<i>:o" an index at or below its oldest bucket, and
  -- "<i>:h" the highest index written. Buckets are read one by one as the
  -- search needs them, so a call costs O(1) reads while nothing waits, and
  -- O(buckets it scans) otherwise, never O(all buckets).
  local c, tot, hi, oldest = {}, {}, {}, {}
  for i = 1, #n do
    c[i] = {}
    local f = redis.call('HMGET', key, i .. ':t', i .. ':o', i .. ':h')
    local total, o, h = tonumber(f[1]) or 0, tonumber(f[2]), tonumber(f[3])
    local old = idx(now, p[i]) - b[i] + 1
    -- Buckets before the span ending at now's bucket are never read again:
    -- drop them and take them off the total.
    if o and h and o < old then
      local del = {}
      for k = o, math.min(old - 1, h) do
        local v = tonumber(redis.call('HGET', key, bucket_field(i, k)))
        if v then
          total = total - v
          del[#del + 1] = bucket_field(i, k)
        end
      end
      for j = 1, #del, 1000 do
        redis.call('HDEL', key, unpack(del, j, math.min(j + 999, #del)))
      end
      redis.call('HSET', key, i .. ':t', string.format('%.0f', total), i .. ':o', string.format('%.0f', old))
      o = old
    end
    tot[i], hi[i], oldest[i] = total, h, o
  end

  -- get returns the units of bucket k of limit i (0 for none), read once.
  local function get(i, k)
    local v = c[i][k]
    if v == nil then
      v = tonumber(redis.call('HGET', key, bucket_field(i, k))) or 0
      c[i][k] = v
    end
    return v
  end

  local function from(i, t, steps)
    local ni, pi, bi = n[i], p[i], b[i]
    local first = idx(t, pi)
    local h = hi[i] or first
    -- The span ending at first: the total, less the buckets after it and
    -- those before it (present when first is ahead of now's bucket).
    local sum = tot[i]
    for k = first + 1, h do sum = sum - get(i, k) end
    if oldest[i] then
      for k = oldest[i], math.min(first - bi, h) do sum = sum - get(i, k) end
    end
    if h < first then h = first end
    -- cand is the candidate bucket; q scans the spans ending at q, sum being
    -- the units of q-B+1..q. A span over the limit rules out every candidate
    -- up to q (each would add to it), so the next is q+1.
    local cand, q = first, first
    while steps > 0 do
      steps = steps - 1
      if sum + cost > ni then
        cand = q + 1
      elseif q >= math.min(cand + bi - 1, math.max(cand, h)) then
        break
      end
      q = q + 1
      sum = sum + get(i, q) - get(i, q - bi)
    end
    return math.max(t, cand * pi), steps
  end

  local t, wait, limit, refused
  t, wait, limit, cause, refused = search(now, cost, max_wait, fb, start, #n, from, cause, tightened, budget)
  if refused then return false, wait, nil, limit, cause end

  -- Count the units, and keep the hash until the last span holding them
  -- ends.
  local till = 0
  for i = 1, #n do
    local k = idx(t, p[i])
    redis.call('HINCRBY', key, bucket_field(i, k), cost)
    redis.call('HINCRBY', key, i .. ':t', cost)
    local o, h = oldest[i], hi[i]
    if not o or k < o then o = k end
    if not h or k > h then h = k end
    redis.call('HSET', key, i .. ':o', string.format('%.0f', o), i .. ':h', string.format('%.0f', h))
    till = math.max(till, (k + b[i]) * p[i])
  end
  expire(key, till, now)
  return true, wait, t, limit, cause
end
