-- also: more rate keys in the same reservation (store.Request.Also), each
-- with its own window limits: the slot is the latest that the request's key
-- and every other key allow, and the units are recorded in every log or in
-- none. The log's script with more keys passes more (see request),
-- also_slot and also_record to log_reserve, which calls also_slot once its
-- own slot is known and also_record once it knows its entry; without more
-- keys it passes none of them.
--
-- more, parsed from (see request):
-- KEYS[#KEYS-p+1..#KEYS]  the p other keys' logs (LISTs, as log's KEYS[1]),
--           in the order of their parts below, under the same hash tag as
--           KEYS[1] on a Cluster (the Go side checks it before the call).
-- ARGV tail, after the request's own window limits:
--           for each part: m (its number of window limits), then unit (1
--           for a unit of its own, see units; else 0), cost, t, burst,
--           pidx, pw (a unit's cost and paced limit; 0 otherwise), then m
--           pairs N, W as log's;
--           a unit with a paced limit takes two KEYS, its log and its
--           pace key;
--           then after: the slot is never before now + after
--           (microseconds; 0: no bound), for a request whose other keys
--           lie in other Cluster slots, reserved by calls of their own
--           (see slots): cause AFTER when it sets the slot;
--           then rec_after: the entry is never before now + rec_after
--           (0: no bound; see slots);
--           then old: an entry to remove first from every part's log ('0':
--           none; the parts script only, see slots);
--           then base: the number of the request's own limits (the reply's
--           limit numbers the parts' limits after them, from base + 1);
--           then len: how many arguments the parts above take.
--
-- Reply: log's. The entry is the same in every log, e = max(s + allowance,
-- the last entry of every log): the latest time the caller may send, never
-- before any log's last entry, so that every log stays ordered and Cancel
-- removes the same value from each. Each log's own slot rule holds for s
-- (s is at least what that log alone allows), and its entry is at or after
-- the send: log's proof holds key by key. Feedback (hold) is read for
-- KEYS[1] only; a part's log that carries the feedback mark (the key is
-- another request's own, see log) keeps it on its new last entry.
--
-- Cost: per part, LINDEX of its last entry and of the entry that decides
-- each limit, one RPUSH, and the trim and TTL as log's, paid as rarely.

-- also_last reads the newest entry of a part's log as a time (its mark
-- stripped), or returns nil, KEYSTATE when it is not a number; third,
-- whether it was marked.
local function also_last(key)
  local e = redis.call('LINDEX', key, -1)
  if not e then return nil end
  e = tonumber(e)
  if not e then return nil, redis.error_reply('KEYSTATE an entry is not a number') end
  return math.abs(e), nil, e < 0
end

-- also_slot(more, s, limit, cause, now, cost, max_wait, allowance) returns
-- the slot, limit and cause once every part of more is counted, starting
-- from the request's own, or a fourth value, KEYSTATE, for an entry that is
-- not a plausible time (as log's). It notes on each part what also_record
-- needs: its last entry, whether it was marked, its largest N and W.
local function also_slot(more, s, limit, cause, now, cost, max_wait, allowance)
  local ORDER, LIMIT, AFTER = 1, 2, 6 -- the causes (see request), as log's
  local j = more.base
  if more.after > 0 and now + more.after > s then s, limit, cause = now + more.after, 0, AFTER end
  for _, part in ipairs(more) do
    local last, bad
    if part.unit then
      s, limit, cause, bad = unit_slot(part, s, limit, cause, now, max_wait, j) -- units
      if bad then return s, limit, cause, bad end
      j = j + #part / 2
      if part.t > 0 then j = j + 1 end
      last = part.last
    else
      local marked
      last, bad, marked = also_last(part.key)
      if bad then return s, limit, cause, bad end
      part.last, part.marked, part.max_n, part.max_w = last, marked, 0, 0
      local latest = last or 0
      for i = 1, #part, 2 do
        local n, w = part[i], part[i + 1]
        j = j + 1
        if n > part.max_n then part.max_n = n end
        if w > part.max_w then part.max_w = w end
        local e, entry
        e, entry, bad = log_after(part.key, last, n, w, cost)
        if bad then return s, limit, cause, bad end
        if entry and entry > latest then latest = entry end
        if e and e > s then s, limit, cause = e, j, LIMIT end
      end
      if implausible(latest, now, max_wait, part.max_w) then
        return s, limit, cause, redis.error_reply('KEYSTATE an entry lies implausibly far in the future')
      end
    end
    if allowance == 0 and last and last > s then s, limit, cause = last, 0, ORDER end
  end
  return s, limit, cause
end

-- also_record(more, rec, now, cost) records cost units in every part's log
-- at the entry, the latest of rec (the request's own entry), now +
-- rec_after and every part's last entry, and returns it for the request's
-- own log.
local function also_record(more, rec, now, cost)
  if more.rec_after > 0 and now + more.rec_after > rec then rec = now + more.rec_after end
  for _, part in ipairs(more) do
    if part.last and part.last > rec then rec = part.last end
  end
  for _, part in ipairs(more) do
    if part.unit then
      unit_record(part, rec, now)
    else
      -- A key that is another request's own may carry the feedback mark
      -- on its last entry (see log): it stays on the last entry.
      local entry = rec
      if part.marked then entry = -rec end
      log_write(part.key, entry, rec, cost, part.max_n, part.max_w, part.last, now)
    end
  end
  return rec
end
