-- cancel_counts: give back the units of one reservation of FixedWindow,
-- SlidingCounter or Buckets.
--
-- KEYS[1]   the HASH of counters.
-- ARGV[1]   the reservation's slot in microseconds.
-- ARGV[2]   its cost.
-- ARGV[3]   1 when each limit also keeps the total of its buckets in field
--           "<i>:t" (Buckets), 0 otherwise.
-- ARGV[4..] per limit, in the reservation's order: the window (fixed, counter)
--           or bucket (buckets) length in microseconds.
--
-- Reply: 1. Counters that have expired or fell below cost meanwhile are
-- removed, never made negative.

local key = KEYS[1]
local slot = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local totals = ARGV[3] == '1'
for i = 4, #ARGV do
  local l = tonumber(ARGV[i])
  local k = idx(slot, l)
  local f = (i - 3) .. ':' .. string.format('%.0f', k)
  local v = tonumber(redis.call('HGET', key, f))
  if v then
    local back = math.min(v, cost)
    if v <= cost then
      redis.call('HDEL', key, f)
    else
      redis.call('HINCRBY', key, f, -cost)
    end
    if totals then redis.call('HINCRBY', key, (i - 3) .. ':t', -back) end
  end
end
return 1
