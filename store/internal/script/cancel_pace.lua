-- cancel_pace: give back the time a reservation took on a paced limit (see
-- pace), then its log entries (see cancel).
--
-- KEYS[2]  the pace key.
-- ARGV[3]  the TAT the reservation left, as the reserve script returned it.
-- ARGV[4]  the time to give back: cost * spacing, in microseconds.
--
-- Only while the TAT is still the one the reservation left (no later
-- reservation was made on it) does it go back by cost * spacing, to
-- max(TAT before, slot + allowance): never looser than before the
-- reservation. Once a later reservation has moved it, the time stays spent:
-- the later slots were placed after it, and handing it back could put more
-- units in an interval than the limit allows.

-- cancel_pace(pace_key, tat, back) moves the TAT at pace_key back by back
-- microseconds while it is still tat (both as the arguments give them).
local function cancel_pace(pace_key, tat, back)
  if redis.call('GET', pace_key) == tat then
    redis.call('SET', pace_key, string.format('%.0f', tat - back), 'KEEPTTL')
  end
end
