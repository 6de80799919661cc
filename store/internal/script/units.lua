-- units: a unit of its own (store.Part.Unit: tokens, points) counted beside
-- the key's log, in the same call, as one more part of also: the request
-- costs part.cost units there, recorded as ONE weighted entry, so that a
-- unit's log holds one entry per request whatever its N.
--
-- part.key  the unit's log: a LIST of pairs, oldest first: the time the
--           request was recorded at (as log's entries, never marked), then
--           its weight, the units it costs (the estimate until settled, see
--           settle).
-- part.pace_key  with a paced limit: its TAT, a STRING as pace's.
-- From ARGV (see request): part.cost; part.t, part.burst, part.pidx and
-- part.pw, the paced limit's spacing, burst, 1-based index among the
-- part's limits and window (t 0: none); the window limits in pairs N, W.
--
-- The slot rule, weighted: scanning the log from its newest entry and
-- summing the weights, the first entry at which the sum exceeds N - cost
-- sets the slot to its time + W: with unit weights that is log_after's
-- (N - cost + 1)-th newest entry. The scan stops at the first entry that
-- has left the window (e + W <= now: it cannot raise a slot); so it reads
-- the entries of the last window, in LRANGEs of 64 pairs. A paced limit
-- is pace's rule with the unit's cost: s = TAT + (cost - 1 - burst) * t.

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
  -- open[i]: the window limit at part[i], part[i + 1] still unresolved.
  local open, left = {}, n / 2
  for i = 1, n, 2 do open[i] = true end
  local sum, from = 0, -1
  while left > 0 do
    local items = redis.call('LRANGE', part.key, from - 127, from)
    local len = #items
    for idx = len - 1, 1, -2 do
      local e, x = tonumber(items[idx]), tonumber(items[idx + 1])
      if not e or not x then
        return s, limit, cause, redis.error_reply('KEYSTATE an entry is not a number')
      end
      sum = sum + x
      for i = 1, n, 2 do
        if open[i] then
          local w = part[i + 1]
          if e + w <= now then
            open[i], left = false, left - 1 -- left the window: no slot from here on
          elseif sum > part[i] - cost then
            open[i], left = false, left - 1
            if e + w > s then
              local k = (i + 1) / 2
              if part.pidx > 0 and k >= part.pidx then k = k + 1 end
              s, limit, cause = e + w, j + k, LIMIT
            end
          end
        end
      end
      if left == 0 then break end
    end
    if len < 128 then break end
    from = from - 128
  end
  return s, limit, cause
end

-- unit_record(part, rec, now) records the request's weighted entry at rec in
-- the unit's log, trims the entries that left its longest window, keeps a
-- TTL past rec, and moves its paced time.
local function unit_record(part, rec, now)
  local key = part.key
  local len = redis.call('RPUSH', key, string.format('%.0f', rec), part.cost)
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
      redis.call('LTRIM', key, 2 * lo + 2, -1)
    end
  end
  -- A TTL once per half window, as write's (one writer's windows: no GT).
  local period = math.max(w / 2, 1000)
  period = period - period % 1
  local start = rec - rec % period
  if not part.last or part.last - part.last % period < start then
    local ttl = start + period + w - now
    redis.call('PEXPIRE', key, (ttl - ttl % 1000) / 1000 + 1)
  end
  if part.t > 0 then pace_record(part.pace_key, part, part.tat, rec, part.cost, now) end
end
