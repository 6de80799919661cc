-- lease: the state of a key's cap on requests in flight (store.Request.InFlight;
-- docs/concurrency.md), and the handover every script that touches it runs.
--
-- The leases: a ZSET of lease ids, each scored by its expiry in microseconds.
-- The queue: a LIST of waiters, oldest first, each "deadline id" (deadline in
-- microseconds: the waiter leaves then). A lease id is also the name of the
-- LIST its waiter blocks on (BLPOP) for the handover: the Go side names it,
-- in the rate key's hash slot.

-- lease_free reclaims the expired leases, hands the free ones to the waiters
-- at the head of the queue (dropping those whose deadline has passed), and
-- returns how many leases are held.
local function lease_free(lk, qk, cap, dur, now)
  redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
  local n = redis.call('ZCARD', lk)
  while n < cap do
    local w = redis.call('LPOP', qk)
    if not w then break end
    local sp = string.find(w, ' ', 1, true)
    local deadline = tonumber(string.sub(w, 1, (sp or 1) - 1)) or 0
    if sp and deadline > now then
      local id = string.sub(w, sp + 1)
      redis.call('ZADD', lk, now + dur, id)
      expire(lk, now + dur, now)
      redis.call('RPUSH', id, 1)
      expire(id, deadline + 1000000, now)
      n = n + 1
    end
  end
  return n
end

-- lease_earliest is the time from now until the earliest lease expires (a
-- lease surely frees by then), or 0 when none is held.
local function lease_earliest(lk, now)
  local e = redis.call('ZRANGE', lk, 0, 0, 'WITHSCORES')
  if e[2] then return math.max(tonumber(e[2]) - now, 0) end
  return 0
end
