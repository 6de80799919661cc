-- prelude: the horizon of a plausible time, and the log's slot rule, which
-- the log, more keys (also) and usage share.

-- implausible(t, now, max_wait, span) says that t, a time a key holds,
-- lies past what any reservation of this caller's kind could have written:
-- now + its max wait (a slot further is refused) + store.MaxAllowance (5 minutes, in µs:
-- an entry goes at most that far past its slot) + span (the longest window,
-- or the spacings a paced time runs ahead of its slot). Such a time is a
-- wrong state, not a limit: see repair.
local function implausible(t, now, max_wait, span)
  return t > now + max_wait + 300000000 + span
end

-- The log's slot rule, written once for log, also and usage (the Go twin
-- is store.memLog.admits):
-- log_after(key, last, n, w, cost) is the earliest time a limit of n units
-- per w µs admits cost more units by the log at key, whose newest entry
-- is last (nil: the log is empty): the (n - cost + 1)-th newest entry (at
-- least the newest) plus w, or nil when the log holds fewer. Second, that
-- entry (its mark stripped); or a third value, the error KEYSTATE, for an
-- entry that is not a number. It reads one LINDEX, none when the newest
-- entry decides.
local function log_after(key, last, n, w, cost)
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
