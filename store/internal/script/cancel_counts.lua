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

-- cancel_counts(key, slot, cost, totals, lengths, from) gives back cost
-- units at slot from the counter of each limit i, whose window or bucket
-- length is lengths[from + i - 1], and from its total when totals is set.
local function cancel_counts(key, slot, cost, totals, lengths, from)
  for i = from, #lengths do
    local l = tonumber(lengths[i])
    local k = idx(slot, l)
    local f = (i - from + 1) .. ':' .. string.format('%.0f', k)
    local v = tonumber(redis.call('HGET', key, f))
    if v then
      local back = math.min(v, cost)
      if v <= cost then
        redis.call('HDEL', key, f)
      else
        redis.call('HINCRBY', key, f, -cost)
      end
      if totals then redis.call('HINCRBY', key, (i - from + 1) .. ':t', -back) end
    end
  end
  return 1
end
