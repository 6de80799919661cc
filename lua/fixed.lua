-- fixed.lua: reserve the earliest send time under fixed windows (the FixedWindow
-- algorithm; seed 002's INCR and EXPIRE, with reservations).
--
-- KEYS[1]   a HASH of counters: field "<i>:<k>" holds the units admitted in
--           window k = floor(t / W_i) of limit i (1-based), that is in
--           [k*W_i, (k+1)*W_i) microseconds.
-- ARGV[1]   cost: units the request takes (integer, 1 <= cost <= every N).
-- ARGV[2]   max wait in microseconds (integer >= 0): a time further away is refused.
-- ARGV[3]   now in microseconds, or "" to read the server clock with TIME.
-- ARGV[4..] the limits, as pairs: N (integer >= 1), W (window in microseconds >= 1).
--
-- Reply: { allowed, wait, slot, limit }, as reserve.lua's:
--   allowed  1 when cost was added to the counters of slot, 0 when nothing was.
--   wait     microseconds from now until slot (the delay, or the time to retry).
--   slot     the reserved send time in microseconds (0 when refused).
--   limit    1-based index of the limit that last moved the slot, 0 when none did.
--
-- The slot is the earliest t >= now whose window, in every limit, holds at most
-- N - cost units. A window counts the units reserved in it whatever their time
-- inside it, so reservations in any order keep at most N in every window.
-- store/counters.go is the reference these steps follow (fixedFrom, earliest).

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
for i = 4, #ARGV, 2 do
  n[#n + 1] = tonumber(ARGV[i])
  w[#w + 1] = tonumber(ARGV[i + 1])
end

-- floor(t / l), exact for the integers a double holds.
local function idx(t, l)
  local k = math.floor(t / l)
  if k * l > t then k = k - 1 elseif (k + 1) * l <= t then k = k + 1 end
  return k
end

-- Load the counters; windows that ended before now (and limits this call
-- does not have) are never read again, and go.
local c, stale = {}, {}
for i = 1, #n do c[i] = {} end
local flat = redis.call('HGETALL', key)
for j = 1, #flat, 2 do
  local i, k = string.match(flat[j], '^(%d+):(%d+)$')
  i, k = tonumber(i), tonumber(k)
  if i and c[i] and k >= idx(now, w[i]) then
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
  while steps > 0 do
    steps = steps - 1
    local k = idx(t, w[i])
    if (c[i][k] or 0) + cost <= n[i] then return t end
    t = (k + 1) * w[i]
  end
  return t
end

local t, limit = now, 0
while true do
  local moved = false
  for i = 1, #n do
    local ti = from(i, t)
    if ti > t then t, limit, moved = ti, i, true end
  end
  if steps <= 0 then return { 0, t - now, 0, limit } end
  if not moved then break end
end

local wait = t - now
if wait > max_wait then
  return { 0, wait, 0, limit }
end

-- Count the units, and keep the hash until the last window holding them ends.
-- A TTL is never shortened: another caller's longer window may need it.
local till = 0
for i = 1, #n do
  local k = idx(t, w[i])
  redis.call('HINCRBY', key, i .. ':' .. string.format('%.0f', k), cost)
  till = math.max(till, (k + 1) * w[i])
end
local ttl = math.floor((till - now) / 1000) + 1
if redis.call('PTTL', key) < ttl then
  redis.call('PEXPIRE', key, string.format('%.0f', ttl))
end
return { 1, wait, t, limit }
