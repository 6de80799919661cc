-- log: the SlidingLog body: reserve the earliest send time in a sliding log
-- (the reservation sliding log of DESIGN.md).
--
-- key       the log: a LIST of send times in microseconds, oldest first.
--           Times at or after "now" are reservations not yet sent. A
--           negative entry is the time -entry, marked: the key has (or had
--           when it was written) upstream feedback to read; see below.
-- fb        optional: the key's feedback (see hold).
-- pace_key  the pace key (see pace), read only under a paced limit (pace),
--           the request's own or a learned one.
-- seen      the log's seen mark (see write), read only when the log is
--           missing: a log lost while its mark lives is taken as full (below).
-- allowance in microseconds (integer >= 0): how late after its slot
--           the caller may send. The entries are recorded at the latest time
--           the request may be sent, not at its slot (see below).
-- limits    the window limits, as pairs: N (integer >= 1), W (window in
--           microseconds >= 1) (see request).
--
-- Returns the values request's reserve_reply takes: when allowed, entry:
-- the value the cost entries were recorded at; Cancel removes cost entries
-- of this value; then, under a paced limit, pace's TAT and spacing; then,
-- when a learned pace holds, the time the key last moved to a stricter one
-- (see feedback), so that a caller may tell which of its waiting
-- reservations were made before it.
-- Or the error KEYSTATE when an entry it reads is not a plausible time (the
-- Go side then repairs the log with the repair script and retries once):
-- not a number, or later than now + max wait + MaxAllowance (5 minutes) +
-- the longest window (see prelude's implausible). A legitimate entry is at
-- most its caller's now + max wait + allowance (its slot is refused past the
-- max wait; the allowance is at most MaxAllowance; an entry never goes
-- before the last, which was bounded alike when written), so only a caller
-- whose max wait exceeds this one's by more than 5 minutes and a window, or
-- a client clock (WithClientTime) ahead by as much, could have written it.
--
-- The slot s is max(now, max_i(entry[-(N_i - cost + 1)] + W_i)), and the
-- entries are recorded at e = max(s + allowance, last entry): the latest time
-- the caller may send, and never before the last entry, so the log stays
-- ordered. Take any window (t - W, t] of the upstream and, of the requests
-- that reached it then, the one reserved last, sent at a >= s. Every other
-- one was sent after t - W >= a - W >= s - W, so its entry (at or after its
-- send) is after s - W: the slot's check counted it. So no window holds more
-- than N, whatever each caller's allowance. Without an allowance the entry is
-- the slot, so the slot is never before the last entry: FIFO across the fleet
-- even if clocks step back. (With one, a request may be sent before an
-- earlier one that was recorded later: waiting behind another caller's
-- allowance would cost rate for nothing.)
--
-- Cost: every Redis command a script runs costs about as much as a short
-- script's whole fixed overhead, so the common call runs four: TIME, LINDEX
-- of the last entry, LINDEX of the entry that decides, RPUSH. The TTL, the
-- trim and the feedback are paid only when they can matter (see each); an
-- empty log pays a GET of its seen mark.
--
-- Lost state. The upstream still counts what a lost log held, so a log
-- missing while its seen mark (see write) lives is refilled with max_n
-- entries at the latest time it may have held, the mark's value (the end
-- of the half window its last entry was in), or now if later: every window
-- limit then waits one window from that time, as if N units had been sent
-- then, and no window at the upstream holds more than N whatever the lost
-- log held, its reservations still waiting included. A paced time missing
-- with it is taken as far ahead as the burst allows from that time. A log
-- that expired has no mark (they share their TTL), and a new one none yet.

-- log_reserve(now, cost, max_wait, server_wait, key, fb, pace_key, seen,
-- allowance, limits, pace, more, also_slot, also_record) reserves the
-- request's slot in the log (the arguments as parse_request returns them)
-- and returns it as reserve_reply takes it (or KEYSTATE). With more keys
-- (more), also's two functions count and record the other keys' logs; nil
-- without.
local function log_reserve(now, cost, max_wait, server_wait, key, fb, pace_key, seen, allowance, limits, pace,
                           more, also_slot, also_record)
  -- The causes (see request), as locals: an upvalue is paid for on every
  -- call, and this function runs on every reservation of the log.
  local NONE, ORDER, LIMIT, UPSTREAM, LEARNED = 0, 1, 2, 3, 4
  local count = #limits -- the window limits' numbers, two each
  -- Whether the request has window limits: a paced limit alone keeps no log.
  local windows = count > 0

  -- The newest entry: a new entry never goes before it (nor, without an
  -- allowance, the slot), and nil says the log is empty (Redis deletes an
  -- empty LIST). A mark on it says there is feedback.
  local last = windows and redis.call('LINDEX', key, -1)
  local marked = true
  if last then
    last = tonumber(last)
    if not last then return redis.error_reply('KEYSTATE an entry is not a number') end
    if last < 0 then last = -last else marked = false end
  end

  -- The largest N and W (for the trim and the TTL), and the span of the
  -- horizon (see prelude's implausible): the longest window, or the spacings
  -- the paced time may run ahead of its slot when they are longer. The Go
  -- side repairs with the same horizon (store.Request.horizon).
  local max_w, max_n = 0, 0
  for i = 1, count, 2 do
    local n, w = limits[i], limits[i + 1]
    if w > max_w then max_w = w end
    if n > max_n then max_n = n end
  end
  local span = max_w
  if pace then span = math.max(span, (pace.burst + cost + 1) * pace.t) end

  -- A log lost (see the header): refilled, with its TTL and its mark, before
  -- anything reads it, and kept so even if this request is then refused. A
  -- mark that is not a plausible time (another program wrote it) counts as
  -- now.
  local lost
  if windows and not last and seen then
    local u = redis.pcall('GET', seen)
    if u then
      u = tonumber(u)
      if not u or implausible(u, now, max_wait, span) then u = now end
      lost = math.max(now, u)
      log_write(key, lost, lost, max_n, max_n, max_w, nil, now, seen)
      last = lost
    end
  end

  -- One pass over the limits: the slot they allow. Entries too old to matter
  -- may still be in the log (trimming is lazy, below): they are at least
  -- max_w before now, so they never set a slot.
  local s, limit, cause = now, 0, NONE
  local tat
  if pace then
    local e, bad
    tat, e, bad = pace_slot(pace_key, pace, cost, now, max_wait, span)
    if bad then return bad end
    if lost and not tat then
      tat = lost + (pace.burst + 1) * pace.t -- lost with the log: its burst spent then
      e = tat + (cost - 1 - pace.burst) * pace.t
    end
    if e > s then s, limit, cause = e, pace.index, LIMIT end
  end
  local last_bad = 0 -- an older entry later than the last (the log is ordered)
  for i = 1, count, 2 do
    local e, entry, bad = log_after(key, last, limits[i], limits[i + 1], cost)
    if bad then return bad end
    if entry and entry > last then last_bad = entry end
    if e and e > s then
      -- The limit's index in the request: the paced one sits among them.
      local j = (i + 1) / 2
      if pace and j >= pace.index then j = j + 1 end
      s, limit, cause = e, j, LIMIT
    end
  end

  -- An entry past the horizon (see the header) would hold the key back for
  -- as long as it lies ahead: a wrong state, not a limit.
  if last and implausible(math.max(last, last_bad), now, max_wait, span) then
    return redis.error_reply('KEYSTATE an entry lies implausibly far in the future')
  end

  -- What the upstream said (one HMGET), read when the log is new or its
  -- last entry is marked: the feedback script marks it when it writes, and
  -- each call marks its own entry while the feedback lasts. A pause and an
  -- exhausted budget hold the slot back to their end, refused at once past
  -- the max server wait; a learned limit counts like one more limit of the
  -- request; a learned pace is reserved on the key's paced state, as the
  -- request's own paced limit would be, with the larger spacing and the
  -- smaller burst when the request has one; a learned margin widens every
  -- window limit (and the trim and TTL keep the wider window, as for a
  -- learned limit's longer window).
  local budget, active = nil, false
  local held, moved = 0, nil -- the end of a pause that holds the slot; when the pace last moved
  local wide = max_w -- the longest window, with a learned margin: what the log must keep
  local renew = false -- a learned limit's window is longer still (see write)
  if fb and marked then
    local bad, till, n, w, pt, pb, xm
    bad, till, budget, n, w, active, pt, pb, moved, xm = hold(fb, now, cost)
    if bad then return bad end
    if till - now > server_wait then return false, till - now, nil, 0, UPSTREAM end
    held = till
    if till >= s then s, limit, cause = till, 0, UPSTREAM end
    if xm > 0 then
      -- A learned margin (see feedback): every window limit is wider by it.
      wide = max_w + xm
      for i = 1, count, 2 do
        local e, _, bad = log_after(key, last, limits[i], limits[i + 1] + xm, cost)
        if bad then return bad end
        if e and e > s then
          local j = (i + 1) / 2
          if pace and j >= pace.index then j = j + 1 end
          s, limit, cause = e, j, LIMIT
        end
      end
    end
    -- A learned limit over a longer window than the request's counts too
    -- when its N is at most the largest (the trim keeps the newest max_n
    -- entries whatever their age), and the log then keeps its window.
    if n and (w <= max_w or n <= max_n) then
      if w > wide then wide, renew = w, true end
      local e, _, bad = log_after(key, last, n, w, cost)
      if bad then return bad end
      if e and e > s then s, limit, cause = e, 0, LEARNED end
    end
    if pt and (not pace or pt > pace.t or pb < pace.burst) then
      -- A cost above the burst + 1 goes as one send: its units are not
      -- spaced from each other (and an expired TAT stays as good as none).
      pb = math.max(pb, cost - 1)
      local e, bad
      if pace then
        pace = { t = math.max(pace.t, pt), burst = math.min(pace.burst, pb), index = pace.index, keep = pace.keep }
        if tat then e = tat + (cost - 1 - pace.burst) * pace.t end
      else
        pace = { t = pt, burst = pb, index = 0, keep = 0 }
        tat, e, bad = pace_slot(pace_key, pace, cost, now, max_wait, span)
        if bad then return bad end
        if lost and not tat then
          tat = lost + (pb + 1) * pt
          e = tat + (cost - 1 - pb) * pt
        end
      end
      if e and e > s then s, limit, cause = e, 0, LEARNED end
    end
  end
  -- A pace that starts slowly (see pace: keep) has earned no burst when it
  -- has no TAT yet, nor at the end of a pause that holds its requests back:
  -- its TAT is then at least burst spacings past now or the pause's end, so
  -- that its requests go evenly spaced from the first, and its burst builds
  -- up only while the key sends slower than its pace.
  if pace and pace.keep > 0 then
    local from = held
    if not tat then from = math.max(from, now) end
    if from > 0 and (not tat or from + pace.burst * pace.t > tat) then
      tat = from + pace.burst * pace.t
      local e = tat + (cost - 1 - pace.burst) * pace.t
      if e > s then s, limit, cause = e, pace.index, LIMIT end
    end
  end
  -- Without an allowance, never before the last entry: the log stays
  -- ordered (FIFO across the fleet) even if clocks step back. With one, the
  -- entry is kept in order below instead.
  if allowance == 0 and last and last > s then s, limit, cause = last, 0, ORDER end
  -- More keys (see also): the slot is the latest any of them allows.
  if also_slot then
    local bad
    s, limit, cause, bad = also_slot(more, s, limit, cause, now, cost, max_wait, allowance)
    if bad then return bad end
  end

  local wait = s - now
  if wait > max_wait then return false, wait, nil, limit, cause end
  spend(fb, cost, budget, s)

  -- Lua numbers that hold integers reach Redis as integers (%.17g before
  -- Redis 7.2, an integer conversion since): times in microseconds stay
  -- below 2^53, so they are exact.
  local rec = s + allowance
  if last and last > rec then rec = last end
  if also_record then rec = also_record(more, rec, now, cost) end -- recorded in every key's log
  local spacing
  if pace then
    tat, spacing = pace_record(pace_key, pace, tat, s + allowance, cost, now), pace.t
    if not windows then return true, wait, s, limit, cause, rec, tat, spacing, moved end -- a paced limit alone keeps no log
  end
  -- Record (marked while feedback lasts), trim lazily, and keep a TTL past
  -- the newest entry (see write).
  local entry = rec
  if active then entry = -rec end
  log_write(key, entry, rec, cost, max_n, wide, last, now, seen, renew)
  return true, wait, s, limit, cause, rec, tat, spacing, moved
end
