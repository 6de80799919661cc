-- usage: read a key's state without changing it (store.Redis.Usage; the
-- Memory store's twin is in store/usage.go). It writes nothing: no trim, no
-- TTL, no mark. Assembled after time, prelude, hold, floor, counting, the
-- algorithm's windows (fixed or counter; the log and buckets use neither:
-- buckets has its search below, bucketFrom), then nopace, or pace for the
-- log with a paced limit, and for the log tat (pace_slot alone: it never
-- records).
--
-- KEYS[1]   the key's state: the log (a LIST) or the counters (a HASH).
-- KEYS[2]   the key's feedback (see hold).
-- KEYS[3]   the log only: the pace key (see pace and tat), read under the
--           request's paced limit or a learned pace.
-- ARGV[1]   cost: 1 (the next free slot is a cost-1 request's).
-- ARGV[2]   a max wait beyond any legitimate one, so that a pace time any
--           caller left is plausible; ARGV[3] now or ""; ARGV[4] a server
--           wait beyond any pause, so that hold never refuses.
-- ARGV[5]   the algorithm: "log", "fixed", "counter" or "buckets".
-- ARGV[6..9] the log with a paced limit: its spacing, burst, index and keep
--           (see pace); the window limits then start at ARGV[10].
-- ARGV[first..] the window limits, as pairs: N, W (microseconds); for
--           buckets, as triples: N, P (bucket length), B (buckets per window).
--
-- Reply: { wait, cause, limit, capped, pause, ln, lw, lrem, budget, brem,
--          len, last, pt, pb, prem, then per limit of the request, in its
--          order: used, reserved, previous }
--   wait     microseconds from now to the earliest slot the limits and the
--            feedback allow a cost-1 request, as log reserves it (the log's
--            order left out);
--   cause, limit as the reserve scripts' (limit 1-based, 0 unless LIMIT);
--   capped   1 when the counting search ran out of steps;
--   pause    microseconds left of a pause (0: none);
--   ln, lw, lrem  a live learned limit of ln per lw µs, lrem µs left (0s: none);
--   budget, brem  a live budget of units left, brem µs to its reset (brem 0: none);
--   len      the log's entries, trimmed or not (0 for the counters);
--   last     the newest entry's time minus now (0 when len is 0);
--   pt, pb, prem  a live learned pace of spacing pt µs and burst pb, prem µs
--            left (0s: none);
--   used     log: entries in (now - W, now]; counting: the units of now's
--            window (buckets: of the B buckets ending with now's);
--   reserved entries after now (log), units of later windows or buckets;
--   previous SlidingCounter: the units of the previous window (else 0).
--   For the paced limit, with k = ceil((TAT - now) / its spacing), 0 without
--   a TAT (its burst for a limit that starts slowly: not earned yet):
--   used = min(k, burst + 1), reserved = k - used, previous 0.

local alg, key, fb = ARGV[5], KEYS[1], KEYS[2]
local n, w, p, b = {}, {}, {}, {}
if alg == 'buckets' then
  for i = first, #ARGV, 3 do
    n[#n + 1] = ARGV[i] + 0
    p[#p + 1] = ARGV[i + 1] + 0
    b[#b + 1] = ARGV[i + 2] + 0
    w[#w + 1] = p[#p] * b[#b]
  end
else
  for i = first, #ARGV, 2 do
    n[#n + 1] = ARGV[i] + 0
    w[#w + 1] = ARGV[i + 1] + 0
    p[#p + 1] = w[#w]
    b[#b + 1] = 1
  end
end
local max_w = 0
for i = 1, #w do max_w = math.max(max_w, w[i]) end

-- The feedback as it stands, fields read raw.
local f = redis.call('HMGET', fb, 'p', 'n', 'w', 'le', 'b', 'r', 'pt', 'pb', 'pe')
local fp, fn, fw, fle = tonumber(f[1]) or 0, tonumber(f[2]), tonumber(f[3]), tonumber(f[4])
local fbud, fr = tonumber(f[5]), tonumber(f[6])
local fpt, fpb, fpe = tonumber(f[7]), tonumber(f[8]), tonumber(f[9])
local pause, ln, lw, lrem, budget, brem, lpt, lpb, lprem = 0, 0, 0, 0, 0, 0, 0, 0, 0
if fp > now then pause = fp - now end
if fn and fw and fle and fle > now then ln, lw, lrem = fn, fw, fle - now end
if fbud and fr and fr > now then budget, brem = fbud, fr - now end
if fpt and fpb and fpe and fpe > now then lpt, lpb, lprem = fpt, fpb, fpe - now end

local per, len, last = {}, 0, 0
local s, limit, cause, capped = now, 0, NONE, 0
local prow -- the paced limit's row
if alg == 'log' then
  -- A paced limit alone keeps no log (see log): the log reads as empty.
  if #n > 0 then len = redis.call('LLEN', key) end
  local function at(i)
    local v = tonumber(redis.call('LINDEX', key, i))
    if not v then error({ err = 'KEYSTATE an entry is not a number' }) end
    return math.abs(v)
  end
  -- after(t) counts the entries recorded after t: the log is ordered, so
  -- a bisection finds the first (O(log len) LINDEX, never the whole list).
  local function after(t)
    local lo, hi = 0, len
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if at(mid) > t then hi = mid else lo = mid + 1 end
    end
    return len - lo
  end
  local future = after(now)
  for i = 1, #n do
    per[#per + 1] = after(now - w[i]) - future
    per[#per + 1] = future
    per[#per + 1] = 0
  end
  local newest -- the newest entry's time (nil: the log is empty)
  if len > 0 then
    newest = at(len - 1)
    last = newest - now
  end
  -- From here, log's slot for a cost of 1, in its order: the paced limit,
  -- the window limits (the log's slot rule, prelude), the feedback, the
  -- slow start; the order of the log left out.
  local tat
  if pace then
    local e, bad
    tat, e, bad = pace_slot(max_w)
    if bad then return bad end
    if e > s then s, limit, cause = e, pace.index, LIMIT end
    local k = 0
    if tat and tat > now then
      k = math.floor((tat - now + pace.t - 1) / pace.t)
    elseif not tat and pace.keep > 0 then
      k = pace.burst
    end
    prow = { math.min(k, pace.burst + 1), 0, 0 }
    prow[2] = k - prow[1]
  end
  for i = 1, #n do
    local e, _, bad = log_after(key, newest, n[i], w[i])
    if bad then return bad end
    if e and e > s then
      local j = i -- the limit's index in the request: the paced one sits among them
      if pace and j >= pace.index then j = j + 1 end
      s, limit, cause = e, j, LIMIT
    end
  end
  local bad, till, _, hn, hw, _, pt, pb = hold(fb)
  if bad then return bad end -- a KEYSTATE error: nothing else refuses within usageServerWait
  local held = till
  if till >= s then s, limit, cause = till, 0, UPSTREAM end
  if hn and hw <= max_w then
    local e, _, bad2 = log_after(key, newest, hn, hw)
    if bad2 then return bad2 end
    if e and e > s then s, limit, cause = e, 0, LEARNED end
  end
  if pt and (not pace or pt > pace.t or pb < pace.burst) then
    pb = math.max(pb, cost - 1)
    local e
    if pace then
      pace = { t = math.max(pace.t, pt), burst = math.min(pace.burst, pb), index = pace.index, keep = pace.keep }
      if tat then e = tat + (cost - 1 - pace.burst) * pace.t end
    else
      pace = { t = pt, burst = pb, index = 0, keep = 0 }
      local bad3
      tat, e, bad3 = pace_slot(max_w)
      if bad3 then return bad3 end
    end
    if e and e > s then s, limit, cause = e, 0, LEARNED end
  end
  if pace and pace.keep > 0 then
    local from = held
    if not tat then from = math.max(from, now) end
    if from > 0 and (not tat or from + pace.burst * pace.t > tat) then
      local e = from + pace.burst * pace.t + (cost - 1 - pace.burst) * pace.t
      if e > s then s, limit, cause = e, pace.index, LIMIT end
    end
  end
else
  -- The counting algorithms: the counters a search from now reads, and the
  -- search of counts.lua, without recording.
  local bad, start, fcause, _, tightened = feedback(n, w)
  if bad then return bad end
  local c = {}
  for i = 1, #n do c[i] = {} end
  -- Each limit's indexes from the first a search from now reads: the
  -- window before now's for counter, the B-1 buckets before for buckets.
  local back = {}
  for i = 1, #n do
    if alg == 'buckets' then back[i] = b[i] - 1 else back[i] = lookback end
  end
  local flat = redis.call('HGETALL', key)
  for j = 1, #flat, 2 do
    local i, k = string.match(flat[j], '^(%d+):(%d+)$')
    i, k = tonumber(i), tonumber(k)
    if i and c[i] and k >= idx(now, p[i]) - back[i] then c[i][k] = tonumber(flat[j + 1]) end
  end
  -- bucketFrom is store/counters.go's bucketsFrom: the earliest time >= t
  -- at which a unit in t's bucket keeps every span of B buckets holding it
  -- within N (buckets.lua's search, over the counters read at once).
  local function bucketFrom(ci, ni, pi, bi, t)
    local start = idx(t, pi)
    local hi, sum = start, 0
    for k, v in pairs(ci) do
      if k > hi then hi = k end
      if k > start - bi and k <= start then sum = sum + v end
    end
    local cand, q = start, start
    while steps > 0 do
      steps = steps - 1
      if sum + cost > ni then
        cand = q + 1
      elseif q >= math.min(cand + bi - 1, math.max(cand, hi)) then
        break
      end
      q = q + 1
      sum = sum + (ci[q] or 0) - (ci[q - bi] or 0)
    end
    return math.max(t, cand * pi)
  end
  local from
  if alg == 'buckets' then
    from = function(i, at) return bucketFrom(c[i], n[i], p[i], b[i], at) end
  else
    from = function(i, at) return within(c[i], n[i], w[i], at) end
  end
  local t, lim, out = earliest(start, #n, from)
  s, cause = t, fcause
  if lim > 0 and tightened[lim] then
    cause = LEARNED
  elseif lim > 0 then
    limit, cause = lim, LIMIT
  end
  if out then capped = 1 end
  for i = 1, #n do
    local k = idx(now, p[i])
    local used, later = 0, 0
    for j, v in pairs(c[i]) do
      if j > k then
        later = later + v
      elseif j > k - b[i] then
        used = used + v
      end
    end
    local prev = 0
    if alg == 'counter' then prev = c[i][k - 1] or 0 end
    per[#per + 1] = used
    per[#per + 1] = later
    per[#per + 1] = prev
  end
end

local reply = { s - now, cause, limit, capped, pause, ln, lw, lrem, budget, brem, len, last, lpt, lpb, lprem }
for i = 1, #per, 3 do
  -- The paced limit's row at its index (pace.index never changes above).
  if prow and (i - 1) / 3 + 1 == pace.index then
    for _, x in ipairs(prow) do reply[#reply + 1] = x end
    prow = nil
  end
  for k = i, i + 2 do reply[#reply + 1] = per[k] end
end
if prow then
  for _, x in ipairs(prow) do reply[#reply + 1] = x end
end
return reply
