-- lease_ops: release, renew, check or leave, on one lease id (see lease).
--
-- KEYS[1] the leases, KEYS[2] the queue.
-- ARGV[1] the operation: "release", "renew", "check" or "leave".
-- ARGV[2] now in microseconds, or "" for the server's TIME.
-- ARGV[3] the cap, ARGV[4] the lease duration in microseconds.
-- ARGV[5] the lease id.
-- ARGV[6] leave only: the caller's entry in the queue ("deadline id inbox").
--
-- Reply: { held, wait }
--   release  held 1 if the lease was still held (and is now given back)
--   renew    held 1 if the lease was still held (and now lasts another
--            duration), 0 if it had expired
--   check    held 1 if the caller, waiting, holds the lease now (handed
--            over); wait is then 0, else the time until the earliest lease
--            expires (0: none held)
--   leave    held 1 if the caller had been handed the lease (given back)
-- Every operation but renew reclaims expired leases and serves the queue.

-- lease_op(op, lk, qk, now, cap, dur, id, entry) runs op on lease id under
-- the cap of the leases lk and the queue qk, and returns the reply.
local function lease_op(op, lk, qk, now, cap, dur, id, entry)
  if op == 'renew' then
    local s = redis.call('ZSCORE', lk, id)
    if s and tonumber(s) > now then
      redis.call('ZADD', lk, now + dur, id)
      expire(lk, now + dur, now)
      return { 1, 0 }
    end
    return { 0, 0 }
  end
  local held = 0
  if op == 'leave' then
    redis.call('LREM', qk, 1, entry)
  end
  if op == 'release' or op == 'leave' then
    local s = redis.call('ZSCORE', lk, id)
    if s and tonumber(s) > now then held = 1 end
    redis.call('ZREM', lk, id)
  end
  lease_free(lk, qk, cap, dur, now)
  if op == 'check' then
    local s = redis.call('ZSCORE', lk, id)
    if s and tonumber(s) > now then return { 1, 0 } end
    return { 0, lease_earliest(lk, now) }
  end
  return { held, 0 }
end
