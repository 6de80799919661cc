-- hold: what the upstream said about the key (store.memFeedback.hold is its
-- Go twin).
--
-- KEYS[2]   optional: the key's feedback, a HASH beside its state under the
--           same hash tag (see feedback): p = pause until (µs); n, w, le =
--           a learned limit of n per w µs, valid until le; b, r = a budget of
--           b units left until the reset r (µs); pt, pb, pe = a learned pace
--           of spacing pt µs and burst pb, valid until pe, to which the key
--           last moved at pm; xm, xe = a learned margin of xm µs beyond the
--           rule's, valid until xe (see feedback). Absent fields say nothing.

-- hold(fb, now, cost) reads the hash fb (one HMGET) for a request of cost
-- units at now, and returns:
--   bad      the error KEYSTATE when a pause or reset lies past MaxFeedback
--            from now; else nil;
--   till     the end of a pause, or of a budget too short for the cost,
--            which holds the slot back to it (0: nothing holds it); a
--            reservation is refused (UPSTREAM) when it ends further than
--            its max server wait;
--   budget   the reset of a budget that covers the cost (see spend), or nil;
--   n, w     a learned limit of n per w µs still valid, or nil;
--   active   whether anything in the hash is still live;
--   pt, pb   a learned pace (spacing in µs, burst) still valid, or nil;
--   pm       when the key last moved to it (µs), or nil;
--   xm       a learned margin (µs) still valid, added to every window
--            limit of the log (see log), or 0.
local function hold(fb, now, cost)
  local f = redis.call('HMGET', fb, 'p', 'n', 'w', 'le', 'b', 'r', 'pt', 'pb', 'pe', 'pm', 'xm', 'xe')
  local till, budget, active = tonumber(f[1]) or 0, nil, false
  local b, r = tonumber(f[5]), tonumber(f[6])
  -- Past MaxFeedback (366 days) from now no feedback is ever written: a
  -- time there is a wrong state (see repair), not a pause.
  if till > now + 31622400000000 or (r or 0) > now + 31622400000000 then
    return redis.error_reply('KEYSTATE a feedback time lies implausibly far in the future')
  end
  if b and r and r > now then
    active = true
    if b < cost then till = math.max(till, r) else budget = r end
  end
  if till > now then
    active = true
  else
    till = 0
  end
  local pt, pb, pe, pm = tonumber(f[7]), tonumber(f[8]), tonumber(f[9]), tonumber(f[10])
  if pt and pb and pe and pe > now and pt >= 1 and pb >= 0 then
    active = true
    if pm and pm < 0 then pm = nil end
  else
    pt, pb, pm = nil, nil, nil
  end
  local xm, xe = tonumber(f[11]) or 0, tonumber(f[12]) or 0
  if xm > 0 and xe > now then active = true else xm = 0 end
  local n, w, le = tonumber(f[2]), tonumber(f[3]), tonumber(f[4])
  if not (n and w and le and le > now) then return nil, till, budget, nil, nil, active, pt, pb, pm, xm end
  return nil, till, budget, n, w, true, pt, pb, pm, xm
end

-- spend(fb, cost, budget, slot) takes cost from the budget in fb whose
-- reset hold returned, for a slot before it. (A Cancel gives nothing back
-- to a budget.)
local function spend(fb, cost, budget, slot)
  if budget and slot < budget then redis.call('HINCRBY', fb, 'b', -cost) end
end
