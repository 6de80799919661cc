-- feedback: record what the upstream said about a key (a pause, a learned
-- limit, a budget), for the reserve scripts to honour (see hold).
--
-- KEYS[1]  the key's feedback: a HASH beside its log, under the same hash tag.
--          Fields (times in microseconds on the same clock as the reserve scripts):
--          p = pause until; n, w, le = learned limit of n per w, valid until
--          le; b, r = budget of b units left until the reset r; pt, pb, pe
--          = learned pace of spacing pt and burst pb, valid until pe; pm =
--          when the key last moved to a stricter pace: a new one, or a
--          smaller burst (the reserve scripts return it, so that a caller
--          may retake what it reserved before; a pace only slowed does not
--          move it); ps = when the pace was last slowed, set or probed;
--          pp = when it was last probed (none: not since it was set);
--          xm, xe = a learned margin of xm beyond the rule's, added to the
--          log's window limits (see log), valid until xe; xs = when it was
--          last widened or probed.
-- KEYS[2]  optional: the key's log (see log), whose last entry is marked
--          (made negative) so that the next reservation reads the feedback:
--          the log reads the hash only when it finds a mark.
-- ARGV[1]  now in microseconds, or "" to read the server clock with TIME.
-- ARGV[2]  pause in microseconds from now (0: none).
-- ARGV[3]  learned limit N (0: none); ARGV[4] its window W and ARGV[5] how
--          long it holds, both in microseconds.
-- ARGV[6]  budget: units remaining; ARGV[7] the reset in microseconds from now
--          (0: no budget); ARGV[8] the slack within which two resets name the
--          same window.
-- ARGV[9]  learned pace: its spacing in microseconds (0: none); ARGV[10]
--          its burst and ARGV[11] how long it holds, in microseconds.
-- ARGV[12] probe: 0, or a quiet time in microseconds: the pace is then a
--          probe towards the configured rate (spacing ARGV[9]): a pace that
--          holds, slower and neither slowed nor probed for the quiet time,
--          moves halfway to it (to it once within 1 %); nothing else is
--          written.
-- ARGV[13] margin: 0, or a widening in microseconds (see below); ARGV[14]
--          how long it holds, ARGV[15] the most the margin may reach and
--          ARGV[16] how long before now the refused request's slot was,
--          all in microseconds.
-- ARGV[17] margin probe: 0, or a quiet time in microseconds: a learned
--          margin that holds, neither widened nor probed for the quiet
--          time, halves (dropped below a millisecond); nothing else is
--          written.
--
-- A widening w merges into the learned margin m (0 if none holds): when
-- there is none, or the refused slot was placed before m was last set
-- (under a narrower margin, which m answers already), m becomes max(m, w);
-- otherwise 2m + w, the whole margin doubled when w is the rule's margin
-- plus twice the refused send's lateness. Never above ARGV[15].
--
-- Reply: { pause, xm, xrem, narrowed, hurried, pt }: the pause end in
-- microseconds from now after the merge (0 if none); the learned margin
-- after a widening or a margin probe and how long it holds, in
-- microseconds (0s: none, or neither asked); narrowed 1 when the margin
-- probe halved it; hurried 1 when the probe moved the pace, pt its spacing
-- after (else 0s).
--
-- Merges never loosen what is already there: a pause ends at the latest end
-- ever given; within one window the smaller budget wins; a pace that holds
-- keeps the longer spacing and the smaller burst (a probe alone hurries
-- it, never past the configured rate). A learned limit is
-- replaced by the latest (the caller never learns one looser than its own
-- limits).

-- parse_feedback() reads ARGV into what the upstream said: now and its
-- named fields (nil for an absent argument).
local function parse_feedback()
  return clock(ARGV[1]), {
    pause = tonumber(ARGV[2]), n = tonumber(ARGV[3]), w = tonumber(ARGV[4]), ttl = tonumber(ARGV[5]),
    remaining = tonumber(ARGV[6]), reset = tonumber(ARGV[7]), slack = tonumber(ARGV[8]),
    pt = tonumber(ARGV[9]), pb = tonumber(ARGV[10]), pttl = tonumber(ARGV[11]),
    probe = tonumber(ARGV[12]) or 0,
    margin = tonumber(ARGV[13]) or 0, mttl = tonumber(ARGV[14]) or 0, mcap = tonumber(ARGV[15]) or 0,
    mage = tonumber(ARGV[16]) or 0, mprobe = tonumber(ARGV[17]) or 0,
  }
end

-- record_feedback(fb, log, now, said) merges what the upstream said into
-- the hash fb, marks the log's last entry (log may be nil), and returns the
-- reply.
local function record_feedback(fb, log, now, said)
  local pause, n, w, ttl = said.pause, said.n, said.w, said.ttl
  local remaining, reset, slack = said.remaining, said.reset, said.slack
  local pt, pb, pttl = said.pt, said.pb, said.pttl
  local f = redis.call('HMGET', fb, 'p', 'le', 'b', 'r', 'pe', 'pt', 'pb', 'ps', 'xm', 'xe', 'xs')
  local p, le, b, r = tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3]), tonumber(f[4]) or 0
  local pe = tonumber(f[5]) or 0
  local xm, xe, xs = tonumber(f[9]) or 0, tonumber(f[10]) or 0, tonumber(f[11]) or 0
  if xe <= now then xm = 0 end

  if said.probe > 0 or said.mprobe > 0 then
    -- A probe towards the configured rate (pt): halfway from a pace that
    -- holds and was left alone for the quiet time; nothing else.
    local held_pt, ps = tonumber(f[6]), tonumber(f[8]) or 0
    local reply = { 0, 0, 0, 0, 0, 0 }
    if said.probe > 0 and pe > now and held_pt and held_pt > pt and now - ps >= said.probe then
      held_pt = pt + math.floor((held_pt - pt) / 2)
      if held_pt - pt <= pt / 100 then held_pt = pt end -- within the least slowing (1 %): there
      local at = string.format('%.0f', now)
      redis.call('HSET', fb, 'pt', string.format('%.0f', held_pt), 'ps', at, 'pp', at)
      reply[5], reply[6] = 1, held_pt
    end
    -- A probe of the margin: halved, when left alone for the quiet time.
    if said.mprobe > 0 and xm > 0 and now - xs >= said.mprobe then
      xm = math.floor(xm / 2)
      if xm < 1000 then xm = 0 end
      redis.call('HSET', fb, 'xm', string.format('%.0f', xm), 'xs', string.format('%.0f', now))
      reply[4] = 1
      if xm > 0 then reply[2], reply[3] = xm, xe - now end
    end
    return reply
  end

  if pause > 0 and now + pause > p then
    p = now + pause
    redis.call('HSET', fb, 'p', string.format('%.0f', p))
  end
  if n > 0 then
    le = now + ttl
    redis.call('HSET', fb, 'n', n, 'w', string.format('%.0f', w), 'le', string.format('%.0f', le))
  end
  if pt > 0 then
    local moved = pe <= now
    if moved then redis.call('HDEL', fb, 'pp') end -- a new pace: not probed yet
    if not moved then
      -- A pace that holds is slowed, never hurried.
      local held_pb = tonumber(f[7]) or pb
      pt, pb = math.max(pt, tonumber(f[6]) or 0), math.min(pb, held_pb)
      moved = pb < held_pb
    end
    pe = now + pttl
    redis.call('HSET', fb, 'pt', string.format('%.0f', pt), 'pb', pb, 'pe', string.format('%.0f', pe),
      'ps', string.format('%.0f', now))
    if moved then redis.call('HSET', fb, 'pm', string.format('%.0f', now)) end
  end
  local reply_xm -- the learned margin after a widening (nil: none asked)
  if said.margin > 0 then
    local m = math.max(xm, said.margin)
    if xm > 0 and now - said.mage >= xs then m = 2 * xm + said.margin end -- placed under xm: doubled
    m = math.min(m, said.mcap)
    xe = now + said.mttl
    if m ~= xm then
      xm = m
      redis.call('HSET', fb, 'xm', string.format('%.0f', xm), 'xs', string.format('%.0f', now))
    end
    redis.call('HSET', fb, 'xe', string.format('%.0f', xe))
    reply_xm = xm
  end
  if reset > 0 then
    local at = now + reset
    if r > now and b and math.abs(at - r) <= slack then
      -- The same window: keep the smaller remaining and the later reset.
      if remaining < b then redis.call('HSET', fb, 'b', remaining) end
      if at > r then
        r = at
        redis.call('HSET', fb, 'r', string.format('%.0f', r))
      end
    elseif at > r then
      r = at
      redis.call('HSET', fb, 'b', remaining, 'r', string.format('%.0f', r))
    end
  end

  -- The hash lives as long as its longest-lived field, never shortened.
  local last = math.max(p, le, r, pe, xe)
  if last > now then expire(fb, last, now) end
  if last > now and log then
    local e = redis.call('LINDEX', log, -1)
    if e and (tonumber(e) or 0) > 0 then redis.call('LSET', log, -1, -tonumber(e)) end
  end
  local reply = { 0, 0, 0, 0, 0, 0 }
  if p > now then reply[1] = p - now end
  if reply_xm then reply[2], reply[3] = reply_xm, xe - now end
  return reply
end
