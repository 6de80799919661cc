-- settle: change the cost a reservation recorded in its units (see units)
-- from the estimate to the actual, atomically, in one call (store.Settle;
-- Cancel settles to 0).
--
-- KEYS      for each unit: its log, its sum, then its pace key when paced.
-- ARGV[1]   now in microseconds, or "" for TIME.
-- ARGV[2]   the entry: the time the reservation recorded at.
-- ARGV[3..] for each unit: estimate, actual, spacing (0: not paced).
--
-- Reply: how many units found their entry (one that left the log is left
-- alone: it no longer counts in any window).
--
-- A window limit: the entry takes the actual weight. A refund only loosens
-- every window, so reservations made since stay valid; an overrun counts
-- from now on: a later reservation's slot moves, one made before the
-- settlement stays where it was placed (docs/costs.md).
-- A paced limit: the TAT moves by (actual - estimate) spacings, an overrun
-- always, a refund only while the entry is the newest of the unit's log:
-- no reservation was placed on the TAT since (as cancel_pace).

-- settle_unit(key, sum_key, pace_key, rec, est, actual, t, now) settles one unit:
-- finds the newest pair (rec, est) by bisection on the times, sets its
-- weight, and moves the TAT; returns 1 when found, 0 otherwise.
local function settle_unit(key, sum_key, pace_key, rec, est, actual, t, now)
  local pairs_n = redis.call('LLEN', key) / 2
  local lo, hi = 0, pairs_n -- the first pair later than rec
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if (tonumber(redis.call('LINDEX', key, 2 * mid)) or 0) <= rec then lo = mid + 1 else hi = mid end
  end
  local i = lo - 1
  while i >= 0 do
    if tonumber(redis.call('LINDEX', key, 2 * i)) ~= rec then return 0 end
    if tonumber(redis.call('LINDEX', key, 2 * i + 1)) == est then break end
    i = i - 1
  end
  if i < 0 then return 0 end
  redis.call('LSET', key, 2 * i + 1, actual)
  local d = actual - est
  if d ~= 0 then redis.call('INCRBY', sum_key, d) end
  if t > 0 and (d > 0 or d < 0 and i == pairs_n - 1) then
    local tat = tonumber(redis.call('GET', pace_key))
    if tat or d > 0 then
      tat = math.max(tat or now, now) + d * t
      if tat > now then
        local ttl = tat - now
        redis.call('SET', pace_key, string.format('%.0f', tat), 'PX', string.format('%.0f', (ttl - ttl % 1000) / 1000 + 1))
      else
        redis.call('DEL', pace_key)
      end
    end
  end
  return 1
end

-- settle_units(keys, from, args, at, rec, now) settles every unit, its
-- keys from keys[from] and its arguments from args[at]; returns how many
-- found their entry.
local function settle_units(keys, from, args, at, rec, now)
  local found, k = 0, from
  for i = at, #args, 3 do
    local t = tonumber(args[i + 2])
    local pace_key
    if t > 0 then pace_key = keys[k + 2] end
    found = found + settle_unit(keys[k], keys[k + 1], pace_key, rec, tonumber(args[i]), tonumber(args[i + 1]), t, now)
    k = k + 2
    if t > 0 then k = k + 1 end
  end
  return found
end
