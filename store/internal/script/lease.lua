-- lease: the state of a key's cap on requests in flight (store.Request.InFlight;
-- docs/concurrency.md), and the handover every script that touches it runs.
--
-- The leases: a ZSET of lease ids, each scored by its expiry in microseconds.
-- The queue: a LIST of waiters, oldest first, each "deadline id inbox"
-- (deadline in microseconds: the waiter leaves then). The inbox is a LIST of
-- the waiter's process, in the rate key's hash slot (the Go side names it),
-- which one blocked call (BLPOP) per process and key reads: the handover
-- pushes the lease id there.

-- lease_free reclaims the expired leases, hands the free ones to the waiters
-- at the head of the queue (dropping those whose deadline has passed), and
-- returns how many leases are held.
local function lease_free(lk, qk, cap, dur, now)
  redis.call('ZREMRANGEBYSCORE', lk, '-inf', now)
  local n = redis.call('ZCARD', lk)
  while n < cap do
    local w = redis.call('LPOP', qk)
    if not w then break end
    local deadline, id, inbox = string.match(w, '^(%d+) (%S+) (.+)$')
    deadline = tonumber(deadline) or 0
    if deadline > now then
      redis.call('ZADD', lk, now + dur, id)
      expire(lk, now + dur, now)
      redis.call('RPUSH', inbox, id)
      expire(inbox, deadline + 1000000, now)
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

-- lease_retry is the RetryAfter of a request refused for want of a lease: a
-- lease frees when its holder's response body is closed, which no store can
-- foresee, so it guesses from the turnover. As long as it has been since a
-- lease was last taken or renewed (the newest score, less the duration), at
-- least 1 ms, once for the request and once for each waiter ahead of it in
-- the queue; at most until the earliest lease expires. A key whose leases
-- change hands often retries soon; one whose holders are stuck backs off
-- about twofold at each refusal.
local function lease_retry(lk, qk, dur, now)
  local e = redis.call('ZRANGE', lk, 0, 0, 'WITHSCORES')
  if not e[2] then return 0 end
  local l = redis.call('ZRANGE', lk, -1, -1, 'WITHSCORES')
  local since = math.max(now - (tonumber(l[2]) - dur), 1000)
  return math.max(math.min(since * (redis.call('LLEN', qk) + 1), tonumber(e[2]) - now), 0)
end
