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

if redis.call('GET', KEYS[2]) == ARGV[3] then
  redis.call('SET', KEYS[2], string.format('%.0f', ARGV[3] - ARGV[4]), 'KEEPTTL')
end
