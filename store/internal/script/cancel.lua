-- cancel: give back the entries of a reservation that will not be sent.
--
-- KEYS[1]  the log (see log).
-- KEYS[2]  its seen mark (see write), deleted when the cancel empties the
--          log: a log emptied so was not lost, and its next reservation is
--          free (cancel paced: KEYS[3]; cancel also: before the other
--          keys' logs; cancel units: the last key).
-- ARGV[1]  the entry in microseconds, as the log script returned it (the slot,
--          or later with an allowance).
-- ARGV[2]  cost: how many entries of that value to remove, from the newest end.
--
-- Reply: the number of entries removed (0 when they had already left the log).
--
-- An entry may carry the feedback mark (its time negated, see log):
-- marked entries are removed too, and if one went, the new last entry takes
-- the mark, which must stay on the last entry while the feedback lasts.

-- cancel_entries(key, entry, cost, seen) removes cost entries of value
-- entry (marked or not) from the newest end of the log at key, passes the
-- mark on to the new last entry if a marked one went, deletes the seen mark
-- seen (nil: none) if the log is then empty, and returns how many it
-- removed.
local function cancel_entries(key, entry, cost, seen)
  local n = redis.call('LREM', key, -cost, entry)
  if n < cost then
    local m = redis.call('LREM', key, -(cost - n), '-' .. entry)
    if m > 0 then
      n = n + m
      local e = redis.call('LINDEX', key, -1)
      if e and (tonumber(e) or 0) > 0 then redis.call('LSET', key, -1, -tonumber(e)) end
    end
  end
  if seen and n > 0 and redis.call('LLEN', key) == 0 then redis.call('DEL', seen) end
  return n
end
