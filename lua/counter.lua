-- counter.lua: reserve the earliest send time under sliding-window counters
-- (the SlidingCounter algorithm; seed 003's weighted previous window, with
-- reservations).
--
-- KEYS[1]   a HASH of counters: field "<i>:<k>" holds the units admitted in
--           window k = floor(t / W_i) of limit i (1-based), that is in
--           [k*W_i, (k+1)*W_i) microseconds.
-- KEYS[2]   optional: the key's feedback HASH (see feedback.lua and reserve.lua):
--           a pause or an exhausted budget holds the slot back (refused at once
--           past the max server wait); a learned limit of n per w tightens
--           every limit to the same rate (N = floor(n * W / w) where lower);
--           a slot before a budget's reset spends it.
-- ARGV[1]   cost: units the request takes (integer, 1 <= cost <= every N).
-- ARGV[2]   max wait in microseconds (integer >= 0): a time further away is refused.
-- ARGV[3]   now in microseconds, or "" to read the server clock with TIME.
-- ARGV[4]   max server wait in microseconds (integer >= 0).
-- ARGV[5..] the limits, as pairs: N (integer >= 1), W (window in microseconds >= 1).
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
-- At a time t in window j, a limit estimates the units of the sliding window
-- ending at t as prev * (1 - (t - j*W) / W) + cur, from the counts of windows
-- j-1 and j. The slot is the earliest t >= now at which, in every limit, the
-- estimate leaves room for cost and cur + cost + next (the estimate at the
-- start of window j+1, where it is highest) stays within N. A window counts
-- its units whatever their time inside it, so reservations in any order keep
-- every estimate made at an admission within N.
-- store/counters.go is the reference these steps follow (counterFrom, earliest).

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

local n, w = {}, {}
for i = 5, #ARGV, 2 do
  n[#n + 1] = tonumber(ARGV[i])
  w[#w + 1] = tonumber(ARGV[i + 1])
end

-- floor(t / l), exact for the integers a double holds.
local function idx(t, l)
  local k = math.floor(t / l)
  if k * l > t then k = k - 1 elseif (k + 1) * l <= t then k = k + 1 end
  return k
end
local max_w = 0
for i = 1, #n do max_w = math.max(max_w, w[i]) end

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
      local m = math.max(math.floor(ln * w[i] / lw), cost)
      if m < n[i] then n[i], tightened[i] = m, true end
    end
  end
end

-- Load the counters; windows older than the one before now's (and limits this
-- call does not have) are never read again, and go.
local c, stale = {}, {}
for i = 1, #n do c[i] = {} end
local flat = redis.call('HGETALL', key)
for j = 1, #flat, 2 do
  local i, k = string.match(flat[j], '^(%d+):(%d+)$')
  i, k = tonumber(i), tonumber(k)
  if i and c[i] and k >= idx(now, w[i]) - 1 then
    c[i][k] = tonumber(flat[j + 1])
  else
    stale[#stale + 1] = flat[j]
  end
end
for j = 1, #stale, 1000 do
  redis.call('HDEL', key, unpack(stale, j, math.min(j + 999, #stale)))
end

local steps = 100000
local function from(i, t)
  local ci, ni, wi = c[i], n[i], w[i]
  while steps > 0 do
    steps = steps - 1
    local j = idx(t, wi)
    local prev, cur, nxt = ci[j - 1] or 0, ci[j] or 0, ci[j + 1] or 0
    local room = ni - cost - cur
    if room >= 0 and cur + cost + nxt <= ni then
      if prev <= room then return t end
      -- prev * (1 - (s - j*W) / W) <= room  <=>  s >= j*W + W * (prev - room) / prev
      local need = j * wi + math.ceil(wi * (prev - room) / prev)
      if need < (j + 1) * wi then return math.max(t, need) end
    end
    t = (j + 1) * wi
  end
  return t
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

-- Count the units, and keep the hash until the last window that weighs them ends.
-- A TTL is never shortened: another caller's longer window may need it.
local till = 0
for i = 1, #n do
  local k = idx(t, w[i])
  redis.call('HINCRBY', key, i .. ':' .. string.format('%.0f', k), cost)
  till = math.max(till, (k + 2) * w[i])
end
local ttl = math.floor((till - now) / 1000) + 1
if redis.call('PTTL', key) < ttl then
  redis.call('PEXPIRE', key, string.format('%.0f', ttl))
end
return { 1, wait, t, limit, source }
