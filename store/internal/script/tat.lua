-- tat: the paced limit's state (see pace), in the log's scripts with or
-- without a paced limit of the request's own: a learned pace (see hold) is
-- reserved on the same state, with pace set by log when it reads one.
--
-- KEYS[3]   the pace key (see pace); passed for every log request, read only
--           when the request or the key's feedback has a paced limit.

-- pace_slot returns the TAT (nil when none: a limit that starts slowly
-- counts one older than its keep as none, whether or not Redis has expired
-- it yet) and the earliest slot the paced limit allows (0 when none), or,
-- third, the error KEYSTATE when the TAT is not a plausible time: not a
-- number, or implausible (see prelude) with the larger of span and
-- (burst + cost + 1) spacings, past what any reservation of a caller with
-- this max wait could have left (as for the log's entries; see log).
local function pace_slot(span)
  local tat = redis.call('GET', KEYS[3])
  if not tat then return nil, 0 end
  tat = tonumber(tat)
  if not tat or implausible(tat, math.max(span, (pace.burst + cost + 1) * pace.t)) then
    return nil, 0, redis.error_reply('KEYSTATE the pace time is not a plausible time')
  end
  if pace.keep > 0 and tat + pace.keep <= now then return nil, 0 end
  return tat, tat + (cost - 1 - pace.burst) * pace.t
end

-- pace_record records cost units from send time r on the TAT and returns it,
-- with a TTL just past it, or keep past it for a limit that starts slowly
-- (see pace): until then, its earned burst stays.
local function pace_record(tat, r)
  local t = math.max(tat or 0, r) + cost * pace.t
  local ttl = t - now + (pace.keep or 0)
  ttl = (ttl - ttl % 1000) / 1000 + 1
  redis.call('SET', KEYS[3], string.format('%.0f', t), 'PX', string.format('%.0f', ttl))
  return t
end
