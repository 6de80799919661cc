-- pace: a paced limit (GCRA, virtual scheduling) beside the log, reserved in
-- the same call: the slot is the latest of what the window limits and the
-- paced limit allow, and the units are recorded in both or in neither.
-- store.Memory is its Go twin; docs/pacing.md has the proof at length.
-- A learned pace (see hold) is reserved on the same state, in every log
-- script: the log then reserves under a pace table of its own making.
--
-- KEYS[3]   the pace key (pace_key): a STRING beside the log, under the
--           same hash tag, holding the limit's theoretical arrival time TAT
--           (microseconds), with a TTL past it (an expired TAT allows as
--           much as none).
-- The paced limit (pace, see request), from ARGV:
-- ARGV[6]   the spacing T in microseconds: the limit's Per over N, rounded
--           up (the transport's Per already holds the Margin: N units take
--           Per + Margin, so the margin is paid once per window).
-- ARGV[7]   the burst B (0 <= B <= N, cost <= B + 1).
-- ARGV[8]   the 1-based index of the paced limit in the request, for the
--           reply's limit.
-- ARGV[9]   keep: 0, or, for a limit that starts slowly (store.Limit
--           SlowStart), how long in microseconds its state outlives its
--           TAT: the limit's window. Such a limit earns its burst: a key
--           without a TAT, and the requests a pause holds back, start as
--           if the burst had just been spent (see log).
-- ARGV[10..] the window limits, as in log (none: the log is neither read nor
--           written, and a learned limit, which counts log entries, is
--           ignored).
--
-- Reply: the log's, with two more elements when allowed: the TAT the
-- reservation left, which Cancel compares (see cancel_pace), and the
-- spacing it was reserved at (a learned pace may widen it: see log); and a
-- third when a learned pace holds (see log).
--
-- The rule. A request of cost c at now gets the slot
--     s = max(now, TAT + (c - 1 - B) * T)          (no TAT: now)
-- and, when allowed, TAT becomes max(TAT, s + A) + c * T, where A is the
-- caller's allowance (ARGV[5]): the units count from the latest time they
-- may be sent, exactly as the log records them at s + A.
--
-- The guarantee. Let r = s + A for each reservation. By the rule, every r
-- satisfies r >= TAT_before + (c - 1) * T - (B*T - A), and TAT grows by at
-- least c*T per reservation, so for any two reservations i before j,
-- r_j - r_i >= (units from i to j, but for one) * T - (B*T - A): the records
-- conform to a GCRA of spacing T and tolerance B*T - A (negative when A
-- exceeds the burst: then they are spaced T + A - B*T). A request is sent
-- within [s, s + A] = [r - A, r] and reaches the upstream after a transit
-- that varies by at most D. So the units reaching an upstream in any
-- interval of length L were recorded within an interval of length L + A + D,
-- which holds at most floor((L + A + D + B*T - A) / T) + 1 units (taking the
-- first and the last reservation in it; one reservation alone holds c <=
-- B + 1), i.e.
--     units in any interval of length L  <=  floor((L + D) / T) + B + 1.
-- (A Cancel moves TAT back only to max(TAT before, r) of the reservation it
-- removes, and an expired TAT is at most now: the inequality holds for the
-- reservations that stay.)
-- * A GCRA upstream (token bucket of B + 1) of the configured rate, spacing
--   T0 = Per0/N <= T, accepts floor(L / T0) + B + 1 in any interval of
--   length L. floor((L + D) / T) <= floor(L / T0) for every L iff
--   D <= T - T0 = Margin/N: the spacing's slack covers a transit variation
--   of Margin/N, and lateness within the allowance costs nothing more than
--   the allowance. A request sent later than A after its slot, or a transit
--   varying by more than Margin/N, can meet a 429 from a strict (B = 0)
--   upstream: the transport retakes a slot when it wakes later than its
--   allowance plus Margin/(2N), but it cannot see a stall between its wake
--   and the upstream's read.
-- * A sliding-window upstream of N per Per0 (Per0 + Margin = N * T): with
--   B = 0, an interval of length Per0 holds at most floor((Per0 + D) / T)
--   + 1 <= N units while D < Margin: the margin is paid once per window, in
--   the spacing. A burst B lets N + B through in a window: a paced limit
--   with a burst is a GCRA, not a window (add a window limit for that).
-- The cost of the allowance: while requests queue, each unit takes
-- T + max(0, A - B*T): with B = 0 every slot pays A (against a strict
-- spacing that is the price of not knowing when the last one was sent);
-- a burst of at least A/T absorbs it, and only the burst shrinks.
--
-- Cost: GET of the TAT, and SET with PX (the TTL in the same command) when
-- allowed: two commands beside the log's.

-- pace_slot(pace_key, pace, cost, now, max_wait, span) returns the TAT (nil when none: a limit that
-- starts slowly counts one older than its keep as none, whether or not
-- Redis has expired it yet) and the earliest slot the paced limit pace
-- allows (0 when none), or, third, the error KEYSTATE when the TAT is not a
-- plausible time: not a number, or implausible (see prelude) with the
-- larger of span and (burst + cost + 1) spacings, past what any reservation
-- of a caller with this max wait could have left (as for the log's
-- entries; see log).
local function pace_slot(pace_key, pace, cost, now, max_wait, span)
  local tat = redis.call('GET', pace_key)
  if not tat then return nil, 0 end
  tat = tonumber(tat)
  if not tat or implausible(tat, now, max_wait, math.max(span, (pace.burst + cost + 1) * pace.t)) then
    return nil, 0, redis.error_reply('KEYSTATE the pace time is not a plausible time')
  end
  if pace.keep > 0 and tat + pace.keep <= now then return nil, 0 end
  return tat, tat + (cost - 1 - pace.burst) * pace.t
end

-- pace_record(pace_key, pace, tat, r, cost, now) records cost units from
-- send time r on the TAT at pace_key and returns it, with a TTL just past it, or keep past it for a
-- limit that starts slowly: until then, its earned burst stays.
local function pace_record(pace_key, pace, tat, r, cost, now)
  local t = math.max(tat or 0, r) + cost * pace.t
  local ttl = t - now + (pace.keep or 0)
  ttl = (ttl - ttl % 1000) / 1000 + 1
  redis.call('SET', pace_key, string.format('%.0f', t), 'PX', string.format('%.0f', ttl))
  return t
end
