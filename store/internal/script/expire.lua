-- expire: the TTL of a key that is not a log (the counters, the leases, the
-- queue, an inbox, the feedback).

-- expire keeps key until at least till (microseconds) from now: a TTL is
-- never shortened, since another caller's longer window may need it.
local function expire(key, till, now)
  local ttl = math.floor((till - now) / 1000) + 1
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, string.format('%.0f', ttl))
  end
end
