-- cancel_also: remove a reservation's entries from the logs of its other
-- keys (store.Request.Also), then, below, from its own key's (see cancel).
--
-- KEYS[#KEYS-p+1..#KEYS]  the p other keys' logs, after cancel's (and
--           cancel_pace's) own keys.
-- ARGV[1], ARGV[2]  as cancel: the entry and the cost (the same in every log,
--           see also).
-- ARGV[#ARGV]  p.
--
-- The other keys' entries never carry the feedback mark (only the request's
-- own key reads feedback), but a marked one is removed all the same.

do
  local p = tonumber(ARGV[#ARGV])
  for i = #KEYS - p + 1, #KEYS do
    local n = redis.call('LREM', KEYS[i], -tonumber(ARGV[2]), ARGV[1])
    if n < tonumber(ARGV[2]) then
      redis.call('LREM', KEYS[i], -(tonumber(ARGV[2]) - n), '-' .. ARGV[1])
    end
  end
end
