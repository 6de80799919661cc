-- cancel_also: remove a reservation's entries from the logs of its other
-- keys (store.Request.Also), before its own key's (see cancel), whose
-- cancel_entries it runs on each.
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

-- cancel_also(keys, from, entry, cost) removes the reservation's entries
-- from the logs keys[from..#keys] (see cancel_entries).
local function cancel_also(keys, from, entry, cost)
  for i = from, #keys do cancel_entries(keys[i], entry, cost) end
end
