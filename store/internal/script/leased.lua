-- leased: take a lease in the same call as the reservation, under a cap on
-- the key's requests in flight (see lease).
--
-- req.lease, parsed from the ends of KEYS and ARGV (see request):
-- KEYS[#KEYS-2] the leases, KEYS[#KEYS-1] the queue, KEYS[#KEYS] the
--               caller's inbox (see lease).
-- ARGV[#ARGV-3] the cap (integer >= 1), ARGV[#ARGV-2] the lease duration in
--               microseconds, ARGV[#ARGV-1] "1" when the caller already holds
--               the lease id (handed over while it waited), "0" otherwise,
--               ARGV[#ARGV] the caller's lease id.
--
-- A lease is free when fewer than cap are held once expired ones are
-- reclaimed and the queue is served: a newcomer never passes a waiter. When
-- none is free, nothing is recorded and the verdict is INFLIGHT, with wait
-- the time to retry after (see lease_retry), and deadline, when the max
-- wait is positive, the time the caller waits in the queue until (it
-- joined it; 0 otherwise). A lease is recorded only when the reservation is
-- granted.

-- leased(req, reserve, ...) is reserve(req, ...)'s verdict when a lease is
-- free (or the caller holds one), INFLIGHT otherwise. A granted reservation
-- records the caller's lease, to last the lease duration from now (a lease
-- it held already is renewed: its send is still to come).
local function leased(req, reserve, ...)
  local l, now = req.lease, req.now
  local n = lease_free(l.key, l.queue, l.cap, l.dur, now)
  local held = l.held
  if held then
    local s = redis.call('ZSCORE', l.key, l.id)
    held = s and tonumber(s) > now
  end
  if not held and n >= l.cap then
    local wait, deadline = lease_retry(l.key, l.queue, l.dur, now), 0
    if req.max_wait > 0 then
      deadline = now + req.max_wait
      redis.call('RPUSH', l.queue, string.format('%.0f', deadline) .. ' ' .. l.id .. ' ' .. l.inbox)
      expire(l.queue, deadline, now)
    end
    return { allowed = false, wait = wait, cause = INFLIGHT, deadline = deadline }
  end
  local v = reserve(req, ...)
  if v.allowed then
    redis.call('ZADD', l.key, now + l.dur, l.id)
    expire(l.key, now + l.dur, now)
  end
  return v
end
