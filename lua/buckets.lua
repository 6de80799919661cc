-- buckets.lua: reserve the earliest send time under precision buckets (the
-- Buckets algorithm; seed 001's [duration, limit, precision], with
-- reservations).
--
-- KEYS[1]   a HASH of counters: field "<i>:<k>" holds the units admitted in
--           bucket k = floor(t / P_i) of limit i (1-based), that is in
--           [k*P_i, (k+1)*P_i) microseconds.
-- KEYS[2]   optional: the key's feedback HASH (see feedback.lua and reserve.lua):
--           a pause or an exhausted budget holds the slot back (refused at once
--           past the max server wait); a learned limit of n per w tightens
--           every limit to the same rate (N = floor(n * P * B / w) where
--           lower); a slot before a budget's reset spends it.
-- ARGV[1]   cost: units the request takes (integer, 1 <= cost <= every N).
-- ARGV[2]   max wait in microseconds (integer >= 0): a time further away is refused.
-- ARGV[3]   now in microseconds, or "" to read the server clock with TIME.
-- ARGV[4]   max server wait in microseconds (integer >= 0).
-- ARGV[5..] the limits, as triples: N (integer >= 1), P (bucket length in
--           microseconds >= 1), B (buckets per window: ceil(W / P), >= 1).
--
-- Reply: { allowed, wait, slot, limit, source }, as reserve.lua's:
--   allowed  1 when cost was added to the counters of slot, 0 when nothing was.
--   wait     microseconds from now until slot (the delay, or the time to retry).
--   slot     the reserved send time in microseconds (0 when refused).
--   limit    1-based index of the limit that last moved the slot when source
--            is 2, 0 otherwise.
--   source   as reserve.lua's: 0 nothing, 2 the limit, 3 the upstream (a pause
--            or a budget), 4 the learned limit.
--
-- A limit counts, at a time in bucket q, the units of the B buckets q-B+1..q.
-- The slot is the earliest t >= now such that, in every limit, a unit in t's
-- bucket p keeps every such span that contains p (those ending at p..p+B-1)
-- within N. A bucket counts its units whatever their time inside it, so
-- reservations in any order keep every span within N.
-- store/counters.go is the reference these steps follow (bucketsFrom, earliest).

local key = KEYS[1]
local cost = tonumber(ARGV[1])
local max_wait = tonumber(ARGV[2])

local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[3])
end

local n, p, b = {}, {}, {}
for i = 5, #ARGV, 3 do
  n[#n + 1] = tonumber(ARGV[i])
  p[#p + 1] = tonumber(ARGV[i + 1])
  b[#b + 1] = tonumber(ARGV[i + 2])
end

-- floor(t / l), exact for the integers a double holds.
local function idx(t, l)
  local k = math.floor(t / l)
  if k * l > t then k = k - 1 elseif (k + 1) * l <= t then k = k + 1 end
  return k
end
local max_w = 0
for i = 1, #n do max_w = math.max(max_w, p[i] * b[i]) end

-- What the upstream said (one HMGET), as store/counters.go's reserveCounts.
local fb, server_wait = KEYS[2], tonumber(ARGV[4])
local start, source, budget, tightened = now, 0, nil, {}
if fb then
  local f = redis.call('HMGET', fb, 'p', 'n', 'w', 'le', 'b', 'r')
  local hold = tonumber(f[1]) or 0
  local left, reset = tonumber(f[5]), tonumber(f[6])
  if left and reset and reset > now then
    if left < cost then hold = math.max(hold, reset) else budget = reset end
  end
  if hold > now then
    if hold - now > server_wait then return { 0, hold - now, 0, 0, 3 } end
    start, source = hold, 3
  end
  local ln, lw, le = tonumber(f[2]), tonumber(f[3]), tonumber(f[4])
  if ln and lw and le and le > now and lw <= max_w then
    -- No counters of its own: each limit is tightened to the same rate.
    for i = 1, #n do
      local m = math.max(math.floor(ln * (p[i] * b[i]) / lw), cost)
      if m < n[i] then n[i], tightened[i] = m, true end
    end
  end
end

-- Besides its buckets, each limit keeps three fields: "<i>:t" the total of
-- its buckets present, "<i>:o" an index at or below its oldest bucket, and
-- "<i>:h" the highest index written. Buckets are read one by one as the
-- search needs them, so a call costs O(1) reads while nothing waits, and
-- O(buckets it scans) otherwise, never O(all buckets).
local function field(i, k) return i .. ':' .. string.format('%.0f', k) end

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
      local v = tonumber(redis.call('HGET', key, field(i, k)))
      if v then
        total = total - v
        del[#del + 1] = field(i, k)
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
    v = tonumber(redis.call('HGET', key, field(i, k))) or 0
    c[i][k] = v
  end
  return v
end

local steps = 100000
local function from(i, t)
  local ni, pi, bi = n[i], p[i], b[i]
  local start = idx(t, pi)
  local h = hi[i] or start
  -- The span ending at start: the total, less the buckets after it and
  -- those before it (present when start is ahead of now's bucket).
  local sum = tot[i]
  for k = start + 1, h do sum = sum - get(i, k) end
  if oldest[i] then
    for k = oldest[i], math.min(start - bi, h) do sum = sum - get(i, k) end
  end
  if h < start then h = start end
  -- cand is the candidate bucket; q scans the spans ending at q, sum being
  -- the units of q-B+1..q. A span over the limit rules out every candidate
  -- up to q (each would add to it), so the next is q+1.
  local cand, q = start, start
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
  return math.max(t, cand * pi)
end

local t, limit = start, 0
local capped = false
while true do
  local moved = false
  for i = 1, #n do
    local ti = from(i, t)
    if ti > t then t, limit, moved = ti, i, true end
  end
  if steps <= 0 then capped = true break end
  if not moved then break end
end
if limit > 0 and tightened[limit] then
  limit, source = 0, 4
elseif limit > 0 then
  source = 2
end

local wait = t - now
if capped or wait > max_wait then
  return { 0, wait, 0, limit, source }
end
if budget and t < budget then redis.call('HINCRBY', fb, 'b', -cost) end

-- Count the units, and keep the hash until the last span holding them ends.
-- A TTL is never shortened: another caller's longer window may need it.
local till = 0
for i = 1, #n do
  local k = idx(t, p[i])
  redis.call('HINCRBY', key, field(i, k), cost)
  redis.call('HINCRBY', key, i .. ':t', cost)
  local o, h = oldest[i], hi[i]
  if not o or k < o then o = k end
  if not h or k > h then h = k end
  redis.call('HSET', key, i .. ':o', string.format('%.0f', o), i .. ':h', string.format('%.0f', h))
  till = math.max(till, (k + b[i]) * p[i])
end
local ttl = math.floor((till - now) / 1000) + 1
if redis.call('PTTL', key) < ttl then
  redis.call('PEXPIRE', key, string.format('%.0f', ttl))
end
return { 1, wait, t, limit, source }
