-- units: a unit of its own (store.Part.Unit: tokens, points) counted beside
-- the key's log, in the same call, as one more part of also: the request
-- costs part.cost units there, recorded as ONE weighted entry, so that a
-- unit's log holds one entry per request whatever its N.
--
-- part.key  the unit's log: a LIST of pairs, oldest first: the time the
--           request was recorded at (as log's entries, never marked), then
--           its weight, the units it costs (the estimate until settled, see
--           settle).
-- part.sum_key  a STRING beside it: the sum of the log's weights.
-- part.pace_key  with a paced limit: its TAT, a STRING as pace's.
-- From ARGV (see request): part.cost; part.t, part.burst, part.pidx and
-- part.pw, the paced limit's spacing, burst, 1-based index among the
-- part's limits and window (t 0: none); the window limits in pairs N, W.
--
-- The slot rule, weighted: the newest entry j at which the sum of the
-- weights from j to the newest exceeds N - cost sets the slot to its time +
-- W (with unit weights, log_after's (N - cost + 1)-th newest entry). With
-- the log's sum S, that is the oldest entry at which the sum of the weights
-- from the oldest reaches S - N + cost, the excess: none when S <= N -
-- cost, which costs nothing to know, and otherwise found from the oldest
-- entry, in LRANGEs of 16 pairs: a full window's excess is about one
-- request's cost, so one LRANGE. A paced limit is pace's rule with the
-- unit's cost: s = TAT + (cost - 1 - burst) * t.
--
-- Cost per reservation: LINDEX of the newest time, GET of the sum, an
-- LRANGE per window limit when the window is full, RPUSH and INCRBY; the
-- trim (every 8 requests) and the TTLs (every half window) as log's.

-- unit_last reads the newest time of a unit's log (nil: empty), or returns
-- nil, KEYSTATE when it is not a number.
local function unit_last(key)
  local e = redis.call('LINDEX', key, -2)
  if not e then return nil end
  e = tonumber(e)
  if not e then return nil, redis.error_reply('KEYSTATE an entry is not a number') end
  return e
end

-- unit_slot(part, s, limit, cause, now, max_wait, j) raises the slot s to
-- what the unit part allows, j being the number of its first limit less
-- one; returns s, limit, cause, or a fourth value, KEYSTATE.
local function unit_slot(part, s, limit, cause, now, max_wait, j)
  local LIMIT = 2
  local cost = part.cost
  local last, bad = unit_last(part.key)
  if bad then return s, limit, cause, bad end
  part.last = last
  if last and implausible(last, now, max_wait, part.pw) then
    return s, limit, cause, redis.error_reply('KEYSTATE an entry lies implausibly far in the future')
  end
  if part.t > 0 then
    local tat = redis.call('GET', part.pace_key)
    if tat then
      tat = tonumber(tat)
      if not tat or implausible(tat, now, max_wait, math.max(part.pw, (part.burst + cost + 1) * part.t)) then
        return s, limit, cause, redis.error_reply('KEYSTATE the pace time is not a plausible time')
      end
      local e = tat + (cost - 1 - part.burst) * part.t
      if e > s then s, limit, cause = e, j + part.pidx, LIMIT end
    end
    part.tat = tat
  end
  local n = #part
  if n == 0 or not last then return s, limit, cause end
  local sum = tonumber(redis.call('GET', part.sum_key)) or 0
  for i = 1, n, 2 do
    local excess = sum - part[i] + cost
    if excess > 0 then
      -- The oldest entry at which the weights from the oldest reach excess.
      local from, acc, e = 0, 0, nil
      while not e do
        local items = redis.call('LRANGE', part.key, from, from + 31)
        if #items == 0 then break end
        for idx = 1, #items - 1, 2 do
          local x = tonumber(items[idx + 1])
          if not x or not tonumber(items[idx]) then
            return s, limit, cause, redis.error_reply('KEYSTATE an entry is not a number')
          end
          acc = acc + x
          if acc >= excess then
            e = tonumber(items[idx])
            break
          end
        end
        from = from + 32
      end
      if e and e + part[i + 1] > s then
        local k = (i + 1) / 2
        if part.pidx > 0 and k >= part.pidx then k = k + 1 end
        s, limit, cause = e + part[i + 1], j + k, LIMIT
      end
    end
  end
  return s, limit, cause
end

-- unit_record(part, rec, now) records the request's weighted entry at rec in
-- the unit's log, trims the entries that left its longest window, keeps a
-- TTL past rec, and moves its paced time.
local function unit_record(part, rec, now)
  local key = part.key
  local len = redis.call('RPUSH', key, string.format('%.0f', rec), part.cost)
  redis.call('INCRBY', part.sum_key, part.cost)
  local w = part.pw
  -- Trim, every 8 entries: the pairs at or before min(now, last) - w, found
  -- by bisection (a pair's time at 2i).
  if part.last and (len / 2) % 8 == 0 then
    local horizon = math.min(now, part.last) - w
    if (tonumber(redis.call('LINDEX', key, 0)) or 0) <= horizon then
      local lo, hi = 0, len / 2 - 1 -- pair lo is at or before, pair hi after (the new one is)
      while hi - lo > 1 do
        local mid = math.floor((lo + hi) / 2)
        if (tonumber(redis.call('LINDEX', key, 2 * mid)) or 0) <= horizon then lo = mid else hi = mid end
      end
      local gone = 0
      for idx, v in ipairs(redis.call('LRANGE', key, 0, 2 * lo + 1)) do
        if idx % 2 == 0 then gone = gone + (tonumber(v) or 0) end
      end
      redis.call('LTRIM', key, 2 * lo + 2, -1)
      redis.call('DECRBY', part.sum_key, gone)
    end
  end
  -- A TTL once per half window, as write's (one writer's windows: no GT).
  local period = math.max(w / 2, 1000)
  period = period - period % 1
  local start = rec - rec % period
  if not part.last or part.last - part.last % period < start then
    local ttl = start + period + w - now
    ttl = (ttl - ttl % 1000) / 1000 + 1
    redis.call('PEXPIRE', key, ttl)
    redis.call('PEXPIRE', part.sum_key, ttl)
  end
  if part.t > 0 then pace_record(part.pace_key, part, part.tat, rec, part.cost, now) end
end
