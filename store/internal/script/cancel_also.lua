-- cancel_also: remove a reservation's entries from the logs of its other
-- keys (store.Request.Also), then, below, from its own key's (see cancel).
--
-- KEYS[#KEYS-p+1..#KEYS]  the p other keys' logs, after cancel's (and
--           cancel_pace's) own keys.
-- ARGV[1], ARGV[2]  as cancel: the entry and the cost (the same in every log,
--           see also).
-- ARGV[#ARGV]  p.
--
-- An entry may carry the feedback mark (when the key is another request's
-- own): as in cancel, marked entries are removed too, and the new last entry
-- takes the mark.

do
  local p, want = tonumber(ARGV[#ARGV]), tonumber(ARGV[2])
  for i = #KEYS - p + 1, #KEYS do
    local n = redis.call('LREM', KEYS[i], -want, ARGV[1])
    if n < want and redis.call('LREM', KEYS[i], -(want - n), '-' .. ARGV[1]) > 0 then
      local e = redis.call('LINDEX', KEYS[i], -1)
      if e and (tonumber(e) or 0) > 0 then redis.call('LSET', KEYS[i], -1, -tonumber(e)) end
    end
  end
end
