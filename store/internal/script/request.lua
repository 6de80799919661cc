-- request: the arguments of a reserve or usage script, read once
-- (parse_request) into values the script's main passes on, by name, to the
-- parts that take them; and the reply of a reserve script (reserve_reply),
-- built from the values a reservation returns.
--
-- KEYS[1]   the key's state: the log (a LIST, see log) or the counters (a
--           HASH, see counts and buckets).
-- KEYS[2]   optional: the key's feedback (see hold).
-- KEYS[3]   the log only: the pace key (see pace), passed for every log
--           request, read only under a paced limit, the request's own or a
--           learned one.
-- KEYS[4]   the log only: the key's seen mark (see write), read only when
--           the log is missing, to tell a log lost from one never written.
-- then      with more keys: the other keys' logs (see also);
-- then      under a cap on requests in flight: the leases, the queue and
--           the caller's inbox (see leased).
--
-- ARGV[1]   cost: how many units the request takes (integer, 1 <= cost <= every N).
-- ARGV[2]   max wait in microseconds (integer >= 0): a slot further away is refused.
-- ARGV[3]   now in microseconds, or "" to read the server clock with TIME.
-- ARGV[4]   max server wait in microseconds (integer >= 0): a pause, or an
--           exhausted budget, ending further away is refused at once.
-- ARGV[5]   the log: the allowance in microseconds (integer >= 0, see log);
--           usage: the algorithm, "log", "fixed", "counter" or "buckets";
--           the counting algorithms: their first limit.
-- ARGV[6..9] under a paced limit (the log and its usage): its spacing,
--           burst, index and keep (see pace).
-- then      the limits: pairs N, W (window in microseconds), or for buckets
--           triples N, P (bucket length), B (buckets per window); from
--           ARGV[5] for the counting algorithms, ARGV[6] for the log and
--           usage, ARGV[10] under a paced limit.
-- then      with more keys: their limits, after, rec_after, old, base and
--           len (see also);
-- then      under a cap: the cap, the lease duration, held and the lease
--           id (see leased).
--
-- Reply of a reserve script: { allowed, wait, slot, limit, cause [, entry
-- [, tat, spacing [, moved]]] } (see reserve_reply), or the error KEYSTATE
-- when a part found the key in a wrong state (see repair).
--
-- Values rather than tables: every call of a script makes its tables anew,
-- and one for the request and one for the result would cost the log's
-- script about a tenth more Redis CPU. The tests of store/internal/script
-- check that only the parsers read KEYS and ARGV.

-- Causes, as store.Cause: NONE (free at once), ORDER (held back to the log's
-- last entry), LIMIT, UPSTREAM (a pause or an exhausted budget), LEARNED (a
-- learned limit), INFLIGHT (no lease free, see leased); and AFTER, which
-- the Go side reads itself: held back to the slot the request's keys in
-- other Cluster slots set (see also's after).
local NONE, ORDER, LIMIT, UPSTREAM, LEARNED, INFLIGHT, AFTER = 0, 1, 2, 3, 4, 5, 6

-- parse_request(kind, paced, also, leased) reads KEYS and ARGV, laid out
-- for kind ("log", "usage" or "counting") with or without a paced limit,
-- more keys and a cap, and returns the request:
--   now, cost, max_wait, server_wait  ARGV[3], ARGV[1], ARGV[2], ARGV[4],
--            as numbers (now from the server's clock for "");
--   key, fb, pace_key  KEYS[1], KEYS[2], KEYS[3] (nil when absent);
--   head     ARGV[5] for the log (its allowance) and usage (its algorithm,
--            a string); nil for the counting algorithms;
--   limits   the request's own limits as a list of numbers, in pairs (N, W)
--            or, for buckets, triples (N, P, B);
--   pace     a paced limit: { t, burst, index, keep }, or nil;
--   more     more keys: { base, after, rec_after, old, and one list per
--            key: its window limits, key, and for a unit its cost, sum_key,
--            pace and pace_key }, or nil (see also, units, slots);
--   lease    a cap: { key, queue, inbox, cap, dur, held, id }, or nil (see
--            leased);
--   seen     the log: KEYS[4], the seen mark (see write); nil otherwise.
local function parse_request(kind, paced, also, leased)
  local KEYS, ARGV = KEYS, ARGV -- locals: a global is looked up at each use
  local last = #ARGV
  local lease, more
  if leased or also then
    local nkeys = #KEYS
    if leased then
      lease = {
        key = KEYS[nkeys - 2], queue = KEYS[nkeys - 1], inbox = KEYS[nkeys],
        cap = ARGV[last - 3] + 0, dur = ARGV[last - 2] + 0, held = ARGV[last - 1] == '1', id = ARGV[last],
      }
      nkeys, last = nkeys - 3, last - 4
    end
    if also then
      local len = ARGV[last] + 0
      more = { base = ARGV[last - 1] + 0, old = ARGV[last - 2], rec_after = ARGV[last - 3] + 0,
        after = ARGV[last - 4] + 0 }
      last = last - len - 5
      local i, nk = last + 1, 0
      while i <= last + len do
        local m = ARGV[i] + 0
        local part = { unit = ARGV[i + 1] == '1', cost = ARGV[i + 2] + 0, t = ARGV[i + 3] + 0,
          burst = ARGV[i + 4] + 0, pidx = ARGV[i + 5] + 0, pw = ARGV[i + 6] + 0 }
        for j = 1, 2 * m do part[j] = ARGV[i + 6 + j] + 0 end
        more[#more + 1] = part
        nk = nk + 1
        if part.unit then nk = nk + 1 end
        if part.t > 0 then nk = nk + 1 end
        i = i + 7 + 2 * m
      end
      local k = nkeys - nk
      for _, part in ipairs(more) do
        k = k + 1
        part.key = KEYS[k]
        if part.unit then
          k = k + 1
          part.sum_key = KEYS[k]
        end
        if part.t > 0 then
          k = k + 1
          part.pace_key = KEYS[k]
        end
      end
    end
  end
  local first, head, seen = 5, nil, nil
  if kind == 'log' then
    first, head, seen = 6, ARGV[5] + 0, KEYS[4]
  elseif kind == 'usage' then
    first, head = 6, ARGV[5]
  end
  local pace
  if paced then
    first = 10
    pace = { t = ARGV[6] + 0, burst = ARGV[7] + 0, index = ARGV[8] + 0, keep = ARGV[9] + 0 }
  end
  -- The limits as numbers: one limit (the common case) in one constructor;
  -- more through unpack, which sizes the list at once (past 1000, one by
  -- one: unpack of a large table overflows the Lua stack).
  local limits
  if last - first == 1 then
    limits = { ARGV[first] + 0, ARGV[last] + 0 }
  else
    local stop = last
    if stop - first >= 1000 then stop = first + 999 end
    limits = { unpack(ARGV, first, stop) }
    for i = stop + 1, last do limits[i - first + 1] = ARGV[i] end
    for i = 1, last - first + 1 do limits[i] = limits[i] + 0 end
  end
  return clock(ARGV[3]), ARGV[1] + 0, ARGV[2] + 0, ARGV[4] + 0, KEYS[1], KEYS[2], KEYS[3],
    head, limits, pace, more, lease, seen
end

-- reserve_reply(allowed, wait, slot, limit, cause, entry, tat, spacing,
-- moved) is the reply of a reserve script for the values a reservation
-- returns:
--   allowed  true when the units were recorded, false when nothing was; or
--            an error reply (KEYSTATE), which goes back as it is;
--   wait     microseconds from now until the slot (the delay when allowed,
--            the time to retry when refused);
--   slot     the reserved send time in microseconds (nil when refused);
--   limit    1-based index of the limit that set the slot when cause is
--            LIMIT (nil: 0);
--   cause    what set the slot, or the refusal;
--   entry    the log only, when allowed: the time the units were recorded
--            at (see log); the counting algorithms record at the slot;
--            INFLIGHT only: until when the caller waits in the queue (0: it
--            did not join it; see leased);
--   tat, spacing  when allowed under a paced limit: the TAT the reservation
--            left, which Cancel compares, and the spacing it was reserved
--            at (see pace);
--   moved    when a learned pace holds: when the key last moved to it.
local function reserve_reply(allowed, wait, slot, limit, cause, entry, tat, spacing, moved)
  if allowed == true then
    -- Redis ends the reply at the first nil: entry, tat, spacing and moved
    -- are left out from the first absent.
    if tat then return { 1, wait, slot, limit, cause, entry, tat, spacing, moved } end
    return { 1, wait, slot, limit, cause, entry }
  elseif allowed == false then
    return { 0, wait, 0, limit or 0, cause, entry }
  end
  return allowed
end
