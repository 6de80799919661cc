-- reserve.lua: reserve the earliest send time in a sliding log (the
-- reservation sliding log of DESIGN.md).
--
-- KEYS[1]   the log: a LIST of send times in microseconds, oldest first.
--           Times at or after "now" are reservations not yet sent.
-- ARGV[1]   cost: how many units the request takes (integer, 1 <= cost <= every N).
-- ARGV[2]   max wait in microseconds (integer >= 0): a slot further away is refused.
-- KEYS[2]   optional: the key's feedback, a HASH beside the log under the same
--           hash tag (see feedback.lua): p = pause until (µs); n, w, le = a
--           learned limit of n per w µs, valid until le; b, r = a budget of b
--           units left until the reset r (µs). Absent fields say nothing.
-- ARGV[3]   now in microseconds, or "" to read the server clock with TIME.
-- ARGV[4]   max server wait in microseconds (integer >= 0): a pause, or an
--           exhausted budget, ending further away is refused at once.
-- ARGV[5..] the limits, as pairs: N (integer >= 1), W (window in microseconds >= 1).
--
-- Reply: { allowed, wait, slot, limit, source }
--   allowed  1 when cost entries were appended at slot, 0 when nothing was
--            recorded (old entries may still have been trimmed).
--   wait     microseconds from now until the slot (the delay when allowed,
--            the time to retry when refused).
--   slot     the reserved send time in microseconds (0 when refused); Cancel
--            removes cost entries of this value.
--   limit    1-based index of the limit that set the slot, 0 when none did.
--   source   what set the slot (or the refusal): 0 the log and its limits,
--            1 the upstream (a pause or an exhausted budget), 2 the learned
--            limit.
--
-- The slot s is max(now, last entry, max_i(entry[-(N_i - cost + 1)] + W_i)):
-- never before the last entry, so the log stays ordered and the only window a
-- new entry can fill is the one ending at s, which then holds exactly N_i.

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

local max_w = 0
for i = 6, #ARGV, 2 do
  local w = tonumber(ARGV[i])
  if w > max_w then max_w = w end
end

-- Trim: entries at or before min(now, last) - max_w lie outside every window
-- a later call will check, because its slot is at or after its own now and
-- after the last entry. Against now alone, a caller with an older now could
-- come next; against last alone, a Cancel could take the last entry away.
-- A bounded number go per call: each call appends cost entries and may drop
-- cost + 2, so a busy log keeps no more than it must and no call pays for a
-- long gap (an idle log expires whole). The log thus holds about the N of the
-- longest window, plus the units of reservations still waiting, plus old
-- entries not trimmed yet.
local len = redis.call('LLEN', key)
local last
if len > 0 then
  last = tonumber(redis.call('LINDEX', key, -1))
  local horizon = math.min(now, last) - max_w
  local dropped = 0
  while dropped < cost + 2 and dropped < len do
    if tonumber(redis.call('LINDEX', key, 0)) > horizon then break end
    redis.call('LPOP', key)
    dropped = dropped + 1
  end
  len = len - dropped
end

local s, limit, source = now, 0, 0
for i = 5, #ARGV, 2 do
  local k = tonumber(ARGV[i]) - cost + 1
  if k <= len then
    local t = tonumber(redis.call('LINDEX', key, -k)) + tonumber(ARGV[i + 1])
    if t > s then s, limit = t, (i - 3) / 2 end
  end
end

-- What the upstream said (one HMGET): a pause and an exhausted budget hold
-- the slot back to their end, refused at once past the max server wait; a
-- learned limit counts like one more limit of the request.
local fb, budget = KEYS[2], nil
if fb then
  local f = redis.call('HMGET', fb, 'p', 'n', 'w', 'le', 'b', 'r')
  local hold = tonumber(f[1]) or 0
  local b, r = tonumber(f[5]), tonumber(f[6])
  if b and r and r > now then
    if b < cost then
      hold = math.max(hold, r)
    else
      budget = r
    end
  end
  if hold > now then
    if hold - now > tonumber(ARGV[4]) then
      return { 0, hold - now, 0, 0, 1 }
    end
    if hold >= s then s, limit, source = hold, 0, 1 end
  end
  local n, w, le = tonumber(f[2]), tonumber(f[3]), tonumber(f[4])
  if n and w and le and le > now and w <= max_w then
    local k = math.max(n - cost + 1, 1)
    if k <= len then
      local t = tonumber(redis.call('LINDEX', key, -k)) + w
      if t > s then s, limit, source = t, 0, 2 end
    end
  end
end
-- Never before the last entry: the log stays ordered (FIFO across the fleet)
-- even if clocks step back.
if last and last > s then s, limit, source = last, 0, 0 end

local wait = s - now
if wait > max_wait then
  return { 0, wait, 0, limit, source }
end
-- A slot before the budget's reset spends it.
if budget and s < budget then redis.call('HINCRBY', fb, 'b', -cost) end

local slot = string.format('%.0f', s)
-- RPUSH in chunks: unpack of a large table overflows the Lua stack.
local chunk = {}
for j = 1, math.min(cost, 1000) do chunk[j] = slot end
local left = cost
while left > 0 do
  if left < #chunk then
    for j = left + 1, #chunk do chunk[j] = nil end
  end
  redis.call('RPUSH', key, unpack(chunk))
  left = left - #chunk
end
-- Idle keys vanish once their newest entry has left the largest window.
-- A TTL is never shortened: another caller's longer window may need it.
local ttl = math.floor((wait + max_w) / 1000) + 1
if len == 0 then
  -- The log did not exist, or the trim emptied (deleted) it: no TTL to keep.
  redis.call('PEXPIRE', key, string.format('%.0f', ttl))
else
  -- Every write sets a TTL, so the log has one: PEXPIRE GT (Redis 7.0)
  -- extends it in one call. An older server answers GT with an error; then
  -- the TTL is read and compared.
  local r = redis.pcall('PEXPIRE', key, string.format('%.0f', ttl), 'GT')
  if type(r) == 'table' and r.err then
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, string.format('%.0f', ttl))
    end
  end
end
return { 1, wait, s, limit, source }
