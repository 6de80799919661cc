-- prelude: the arguments and the reply every reserve script shares, the
-- horizon of a plausible time, and the log's slot rule (the usage scripts
-- share it too).
--
-- ARGV[1]   cost: how many units the request takes (integer, 1 <= cost <= every N).
-- ARGV[2]   max wait in microseconds (integer >= 0): a slot further away is refused.
-- ARGV[3]   now in microseconds, or "" to read the server clock with TIME.
-- ARGV[4]   max server wait in microseconds (integer >= 0): a pause, or an
--           exhausted budget, ending further away is refused at once.
-- ARGV[5..] the algorithm's own (see its part below).
--
-- Reply: { allowed, wait, slot, limit, cause [, entry] }
--   allowed  1 when the units were recorded, 0 when nothing was.
--   wait     microseconds from now until the slot (the delay when allowed,
--            the time to retry when refused).
--   slot     the reserved send time in microseconds (0 when refused).
--   limit    1-based index of the limit that set the slot when cause is
--            LIMIT, 0 otherwise.
--   cause    what set the slot, or the refusal, as store.Cause: NONE (free at
--            once), ORDER (held back to the log's last entry), LIMIT, UPSTREAM
--            (a pause or an exhausted budget), LEARNED (a learned limit).
--   entry    the log only: the time the units were recorded at (see log);
--            the counting algorithms record at the slot and leave it out.

local NONE, ORDER, LIMIT, UPSTREAM, LEARNED = 0, 1, 2, 3, 4
-- Strings become numbers by arithmetic (x + 0): cheaper than tonumber here.
local cost, max_wait, server_wait = ARGV[1] + 0, ARGV[2] + 0, ARGV[4] + 0
local now = clock(ARGV[3])

-- implausible(t, span) says that t, a time a key holds, lies past what any
-- reservation of this caller's kind could have written: now + its max wait
-- (a slot further is refused) + store.MaxAllowance (5 minutes, in µs: an
-- entry goes at most that far past its slot) + span (the longest window, or
-- the spacings a paced time runs ahead of its slot). Such a time is a wrong
-- state, not a limit: see repair.
local function implausible(t, span)
  return t > now + max_wait + 300000000 + span
end

-- The log's slot rule, written once for log, also and usage (the Go twin
-- is store.memLog.admits):
-- log_after(key, last, n, w) is the earliest time a limit of n units per w
-- µs admits cost more units by the log at key, whose newest entry is last
-- (nil: the log is empty): the (n - cost + 1)-th newest entry (at least the
-- newest) plus w, or nil when the log holds fewer. Second, that entry (its
-- mark stripped); or a third value, the error KEYSTATE, for an entry that is
-- not a number. It reads one LINDEX, none when the newest entry decides.
local function log_after(key, last, n, w)
  if not last then return nil end
  local k = math.max(n - cost + 1, 1)
  local e = last
  if k > 1 then
    e = redis.call('LINDEX', key, -k)
    if not e then return nil end
    e = tonumber(e)
    if not e then return nil, nil, redis.error_reply('KEYSTATE an entry is not a number') end
    e = math.abs(e)
  end
  return e + w, e
end
