-- usage: read a key's state without changing it (store.Redis.Usage; the
-- Memory store's twin is in store/usage.go). It writes nothing: no trim, no
-- TTL, no mark. usage reads the feedback as it stands, then the state with
-- usage_log (the log, with pace's pace_slot alone: it never records) or
-- usage_counts (the counting algorithms, with the windows of fixed or
-- counter, or the buckets' search), and builds the reply (usage_reply).
--
-- The request (see request, kind "usage"):
-- KEYS[1]   the key's state: the log (a LIST) or the counters (a HASH).
-- KEYS[2]   the key's feedback (see hold).
-- KEYS[3]   the log only: the pace key (see pace), read under the
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
--          len, last, pt, pb, prem, pch, pprobed, xm, xrem, xch, then per
--          limit of the request, in its order: used, reserved, previous }
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
--   pch      µs since that pace was last set, slowed or probed (ps);
--   pprobed  µs since a probe last sped it up, plus one (pp; 0: none since
--            it was set, or no pace);
--   xm, xrem, xch  a live learned margin of xm µs, xrem µs left, last
--            widened or probed xch µs ago (0s: none);
--   used     log: entries in (now - W, now]; counting: the units of now's
--            window (buckets: of the B buckets ending with now's);
--   reserved entries after now (log), units of later windows or buckets;
--   previous SlidingCounter: the units of the previous window (else 0).
--   For the paced limit, with k = ceil((TAT - now) / its spacing), 0 without
--   a TAT (its burst for a limit that starts slowly: not earned yet):
--   used = min(k, burst + 1), reserved = k - used, previous 0.

-- usage_limits(alg, limits) returns the request's limits as lists: n, w
-- (the window: for buckets P * B), p (the bucket length: for the others W)
-- and b (buckets per window: for the others 1).
local function usage_limits(alg, limits)
  local n, w, p, b = {}, {}, {}, {}
  if alg == 'buckets' then
    for i = 1, #limits, 3 do
      n[#n + 1] = limits[i]
      p[#p + 1] = limits[i + 1]
      b[#b + 1] = limits[i + 2]
      w[#w + 1] = p[#p] * b[#b]
    end
  else
    for i = 1, #limits, 2 do
      n[#n + 1] = limits[i]
      w[#w + 1] = limits[i + 1]
      p[#p + 1] = w[#w]
      b[#b + 1] = 1
    end
  end
  return n, w, p, b
end

-- usage_feedback(fb, now) starts the usage with the feedback in fb as it
-- stands at now, fields read raw (0s: none): pause; ln, lw, lrem; budget,
-- brem; lpt, lpb, lprem, lpch, lpprobed; xm, xrem, xch (see the reply).
local function usage_feedback(fb, now)
  local f = redis.call('HMGET', fb, 'p', 'n', 'w', 'le', 'b', 'r', 'pt', 'pb', 'pe', 'ps', 'pp', 'xm', 'xe', 'xs')
  local fp, fn, fw, fle = tonumber(f[1]) or 0, tonumber(f[2]), tonumber(f[3]), tonumber(f[4])
  local fbud, fr = tonumber(f[5]), tonumber(f[6])
  local fpt, fpb, fpe = tonumber(f[7]), tonumber(f[8]), tonumber(f[9])
  local fps, fpp = tonumber(f[10]) or now, tonumber(f[11])
  local fxm, fxe, fxs = tonumber(f[12]) or 0, tonumber(f[13]) or 0, tonumber(f[14]) or now
  local v = { pause = 0, ln = 0, lw = 0, lrem = 0, budget = 0, brem = 0, lpt = 0, lpb = 0, lprem = 0,
    lpch = 0, lpprobed = 0, xm = 0, xrem = 0, xch = 0 }
  if fp > now then v.pause = fp - now end
  if fn and fw and fle and fle > now then v.ln, v.lw, v.lrem = fn, fw, fle - now end
  if fbud and fr and fr > now then v.budget, v.brem = fbud, fr - now end
  if fpt and fpb and fpe and fpe > now then
    v.lpt, v.lpb, v.lprem, v.lpch = fpt, fpb, fpe - now, math.max(now - fps, 0)
    if fpp then v.lpprobed = math.max(now - fpp, 0) + 1 end
  end
  if fxm > 0 and fxe > now then v.xm, v.xrem, v.xch = fxm, fxe - now, math.max(now - fxs, 0) end
  return v
end

-- usage_reply(v, pace) is the reply for the usage v: its named fields in
-- the order of the header, then its rows (v.rows, three numbers per window
-- limit), the paced limit's (v.paced_row) at its index among them.
local function usage_reply(v, pace)
  local reply = {
    v.wait, v.cause, v.limit, v.capped, v.pause, v.ln, v.lw, v.lrem, v.budget, v.brem,
    v.len, v.last, v.lpt, v.lpb, v.lprem, v.lpch, v.lpprobed, v.xm, v.xrem, v.xch,
  }
  local rows, prow = v.rows, v.paced_row
  for i = 1, #rows, 3 do
    -- The paced limit's row at its index.
    if prow and (i - 1) / 3 + 1 == pace.index then
      for _, x in ipairs(prow) do reply[#reply + 1] = x end
      prow = nil
    end
    for k = i, i + 2 do reply[#reply + 1] = rows[k] end
  end
  if prow then
    for _, x in ipairs(prow) do reply[#reply + 1] = x end
  end
  return reply
end

-- usage(state, now, cost, max_wait, key, fb, pace_key, alg, limits, pace,
-- within, lookback) reads the feedback, then the key's state with state
-- (usage_log, or usage_counts with the windows of fixed or counter: their
-- within and LOOKBACK), for the request as parse_request returns it, and
-- returns the reply, or an error (KEYSTATE) as it is.
local function usage(state, now, cost, max_wait, key, fb, pace_key, alg, limits, pace, within, lookback)
  local v = usage_feedback(fb, now)
  local n, w, p, b = usage_limits(alg, limits)
  local bad = state(v, now, cost, max_wait, key, fb, pace_key, alg, pace, n, w, p, b, within, lookback)
  if bad then return bad end
  return usage_reply(v, pace)
end
