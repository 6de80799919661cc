-- cancel.lua: give back the entries of a reservation that will not be sent.
--
-- KEYS[1]  the log (see reserve.lua).
-- ARGV[1]  the slot in microseconds, as reserve.lua returned it.
-- ARGV[2]  cost: how many entries of that value to remove, from the newest end.
--
-- Reply: the number of entries removed (0 when they had already left the log).

return redis.call('LREM', KEYS[1], -tonumber(ARGV[2]), ARGV[1])
