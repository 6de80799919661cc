-- repair: put a rate key's Redis keys back into a state the reserve scripts
-- can read, after one of them found a key in a wrong state (a WRONGTYPE
-- reply, a hash value that is not an integer, or log's KEYSTATE error).
-- It runs only after such an error, never on the common path, and it is
-- idempotent: two processes that repair the same key at once leave it as one
-- would.
--
-- KEYS[1]  the key's state: the log (a LIST) or a counting algorithm's HASH.
-- KEYS[2]  the key's feedback (a HASH, see hold), under the same hash tag.
-- KEYS[3]  optional: a paced limit's state (a STRING, see pace).
-- ARGV[1]  the type KEYS[1] must have: "list" or "hash".
-- ARGV[2]  now in microseconds, or "" to read the server clock with TIME.
-- ARGV[3]  the horizon of a log, in microseconds from now: an entry (or a
--          pace time) later than now + horizon is implausible (see log's
--          and pace's headers).
-- ARGV[4]  MaxFeedback in microseconds: a pause, a learned limit's or
--          pace's end or a reset (fields p, le, pe, r) later than now + this
--          is implausible.
--
-- Reply: { state, feedback[, pace] }, for each key what was done: -1
-- deleted (it had another type), n >= 0 the number of entries or fields
-- removed (those that are not numbers, or past the horizon, or, in the
-- feedback, past MaxFeedback; the pace time is removed whole).
--
-- Everything under the store's prefix is the store's own, so what its
-- scripts cannot read may go. Removing entries from a log only loosens its
-- windows, and only by what no script could count anyway. A log, feedback or
-- pace key kept without a TTL (another program wrote it) gets one: twice
-- the horizon (MaxFeedback for the feedback), past anything it may hold.

local function fix(key, want, horizon)
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then return 0 end
  if t ~= want then
    redis.call('DEL', key)
    return -1
  end
  local n = 0
  if want == 'list' then
    local bad = {}
    for _, e in ipairs(redis.call('LRANGE', key, 0, -1)) do
      local v = tonumber(e)
      if not v or math.abs(v) > horizon then bad[e] = true end
    end
    for e in pairs(bad) do n = n + redis.call('LREM', key, 0, e) end
  else
    local flat = redis.call('HGETALL', key)
    for j = 1, #flat, 2 do
      local v = tonumber(flat[j + 1])
      local is_time = flat[j] == 'p' or flat[j] == 'le' or flat[j] == 'r' or flat[j] == 'pe'
      if not v or v % 1 ~= 0 or (horizon and is_time and v > horizon) then
        n = n + redis.call('HDEL', key, flat[j])
      end
    end
  end
  return n
end

-- fix_pace deletes a pace time that is not a plausible time.
local function fix_pace(key, horizon)
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then return 0 end
  if t ~= 'string' then
    redis.call('DEL', key)
    return -1
  end
  local v = tonumber(redis.call('GET', key))
  if v and v <= horizon then return 0 end
  redis.call('DEL', key)
  return 1
end

-- expiring gives key, when it exists without a TTL, one of us microseconds.
local function expiring(key, us)
  if redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, string.format('%.0f', math.floor(us / 1000) + 1))
  end
end

-- repair(state, fb, pace_key, want, now, span, max_feedback) repairs the
-- state (of type want), the feedback and the pace key (nil: none), with the
-- log's horizon span and MaxFeedback in microseconds, and returns the reply.
local function repair(state, fb, pace_key, want, now, span, max_feedback)
  -- The state's hash holds counters, not times: no horizon.
  local horizon = nil
  if want == 'list' then horizon = now + span end
  local done = { fix(state, want, horizon), fix(fb, 'hash', now + max_feedback) }
  if pace_key then done[3] = fix_pace(pace_key, now + span) end
  if horizon then expiring(state, 2 * span) end
  expiring(fb, max_feedback)
  if pace_key then expiring(pace_key, 2 * span) end
  return done
end
