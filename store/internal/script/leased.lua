-- leased: take a lease in the same call as the reservation, under a cap on
-- the key's requests in flight (see lease).
--
-- lease, parsed from the ends of KEYS and ARGV (see request):
-- KEYS[#KEYS-2] the leases, KEYS[#KEYS-1] the queue, KEYS[#KEYS] the
--               caller's inbox (see lease).
-- ARGV[#ARGV-3] the cap (integer >= 1), ARGV[#ARGV-2] the lease duration in
--               microseconds, ARGV[#ARGV-1] "1" when the caller already holds
--               the lease id (handed over while it waited), "0" otherwise,
--               ARGV[#ARGV] the caller's lease id.
--
-- A lease is free when fewer than cap are held once expired ones are
-- reclaimed and the queue is served: a newcomer never passes a waiter. When
-- none is free, nothing is recorded and the reservation is refused with
-- cause INFLIGHT, wait the time to retry after (see lease_retry), and, in
-- place of entry, the time the caller waits in the queue until when the max
-- wait is positive (it joined it; 0 otherwise). A lease is recorded only
-- when the reservation is granted.

-- leased(lease, now, max_wait, reserve, ...) returns reserve(...) (the
-- values reserve_reply takes) when a lease is free (or the caller holds
-- one), an INFLIGHT refusal otherwise. A granted reservation records the
-- caller's lease, to last the lease duration from now (a lease it held
-- already is renewed: its send is still to come).
local function leased(lease, now, max_wait, reserve, ...)
  local l = lease
  local n = lease_free(l.key, l.queue, l.cap, l.dur, now)
  local held = l.held
  if held then
    local s = redis.call('ZSCORE', l.key, l.id)
    held = s and tonumber(s) > now
  end
  if not held and n >= l.cap then
    local wait, deadline = lease_retry(l.key, l.queue, l.dur, now), 0
    if max_wait > 0 then
      deadline = now + max_wait
      redis.call('RPUSH', l.queue, string.format('%.0f', deadline) .. ' ' .. l.id .. ' ' .. l.inbox)
      expire(l.queue, deadline, now)
    end
    return false, wait, nil, 0, INFLIGHT, deadline
  end
  local allowed, wait, slot, limit, cause, entry, tat, spacing, moved = reserve(...)
  if allowed == true then
    redis.call('ZADD', l.key, now + l.dur, l.id)
    expire(l.key, now + l.dur, now)
  end
  return allowed, wait, slot, limit, cause, entry, tat, spacing, moved
end
