-- lease_open: take a lease in the same call as the reservation.
--
-- KEYS[#KEYS-2] the leases, KEYS[#KEYS-1] the queue, KEYS[#KEYS] the
--               caller's inbox (see lease).
-- ARGV[#ARGV-3] the cap (integer >= 1), ARGV[#ARGV-2] the lease duration in
--               microseconds, ARGV[#ARGV-1] "1" when the caller already holds
--               the lease id (handed over while it waited), "0" otherwise,
--               ARGV[#ARGV] the caller's lease id.
-- These are taken off KEYS and ARGV here, so the parts below read theirs as
-- they would without a cap.
--
-- A lease is free when fewer than cap are held once expired ones are
-- reclaimed and the queue is served: a newcomer never passes a waiter. When
-- none is free, nothing is recorded and the reply is
--   { 0, wait, 0, 0, INFLIGHT, deadline }
-- with wait the time to retry after (see lease_retry), and deadline, when
-- the max wait is positive, the time the caller waits in the queue until
-- (it joined it; 0 otherwise). The algorithm's part below runs as a function;
-- a lease is recorded only when it grants the reservation (lease_close).

local INFLIGHT = 5
local lease_key, lease_queue, lease_inbox = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
local lease_cap, lease_dur, lease_held, lease_id = ARGV[#ARGV - 3] + 0, ARGV[#ARGV - 2] + 0, ARGV[#ARGV - 1] == '1', ARGV[#ARGV]
for _ = 1, 3 do KEYS[#KEYS] = nil end
for _ = 1, 4 do ARGV[#ARGV] = nil end
local lease_n = lease_free(lease_key, lease_queue, lease_cap, lease_dur, now)
if lease_held then
  local s = redis.call('ZSCORE', lease_key, lease_id)
  lease_held = s and tonumber(s) > now
end
if not lease_held and lease_n >= lease_cap then
  local wait, deadline = lease_retry(lease_key, lease_queue, lease_dur, now), 0
  if max_wait > 0 then
    deadline = now + max_wait
    redis.call('RPUSH', lease_queue, string.format('%.0f', deadline) .. ' ' .. lease_id .. ' ' .. lease_inbox)
    expire(lease_queue, deadline, now)
  end
  return { 0, wait, 0, 0, INFLIGHT, deadline }
end

local function lease_body()
