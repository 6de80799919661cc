-- cancel: give back the entries of a reservation that will not be sent.
--
-- KEYS[1]  the log (see log).
-- ARGV[1]  the entry in microseconds, as the log script returned it (the slot,
--          or later with an allowance).
-- ARGV[2]  cost: how many entries of that value to remove, from the newest end.
--
-- Reply: the number of entries removed (0 when they had already left the log).
--
-- An entry may carry the feedback mark (its time negated, see log):
-- marked entries are removed too, and if one went, the new last entry takes
-- the mark, which must stay on the last entry while the feedback lasts.

local key, slot, cost = KEYS[1], ARGV[1], tonumber(ARGV[2])
local n = redis.call('LREM', key, -cost, slot)
if n < cost then
  local m = redis.call('LREM', key, -(cost - n), '-' .. slot)
  if m > 0 then
    n = n + m
    local e = redis.call('LINDEX', key, -1)
    if e and (tonumber(e) or 0) > 0 then redis.call('LSET', key, -1, -tonumber(e)) end
  end
end
return n
