-- write: what every log does when it records: push the entries, trim those
-- no later call can count, and keep a TTL past the newest. The log body
-- (log) calls log_write for the request's own key, and also for each of
-- its other keys. (One function, not three: each function a script's hot
-- path calls is an upvalue of its caller, paid for on every call.)
--
-- The seen mark (KEYS[4], a STRING beside the log under the same hash tag)
-- says that the log holds, or held, entries up to its value (µs). It is
-- written with the log's TTL, by the same write, so it lives exactly as
-- long as the log (or less, where another caller's longer window keeps the
-- log longer): a log missing while its mark exists was lost (an operator's
-- DEL, a reset, a value of another type repaired away, an eviction), not
-- expired, and log assumes the worst of it. A Cancel never empties a log
-- (see cancel), so no other way leaves a mark without its log.

-- log_write(key, entry, rec, cost, max_n, max_w, last, now, seen, renew)
-- records cost entries of value entry (rec, or -rec when marked) at now in
-- key, the log of limits of at most max_n units over at most max_w
-- microseconds, whose last entry before the write was last (nil: the log
-- was new); seen is the log's seen mark (nil: none, as for more keys'
-- logs); renew says that a learned limit widened max_w beyond the
-- request's own windows (see log), so that the TTL is renewed on every
-- write.
local function log_write(key, entry, rec, cost, max_n, max_w, last, now, seen, renew)
  -- Push, in chunks: unpack of a large table overflows the Lua stack.
  local len
  if cost == 1 then
    len = redis.call('RPUSH', key, entry)
  else
    local left = cost
    while left > 0 do
      local chunk = {}
      for j = 1, math.min(left, 1000) do chunk[j] = entry end
      len = redis.call('RPUSH', key, unpack(chunk))
      left = left - #chunk
    end
  end

  -- Trim, lazily: entries at or before min(now, last) - max_w lie outside
  -- every window a later call will check, because its slot is at or after
  -- its own now, and (without an allowance) after the last entry. (Against
  -- now alone, a caller with an older now could come next; against last
  -- alone, a Cancel could take the last entry away. A caller with an
  -- allowance and an older now, a clock that stepped back, may find an
  -- entry it would have counted trimmed: its clock was behind when that
  -- entry was sent, so the entry was sent earlier than it reads.) Only the
  -- newest max_n entries can set a slot, so the older ones go once they
  -- have left the window, in one LTRIM, each time the log grows past
  -- another multiple of `slack`: most calls pay nothing, and the log holds
  -- at most max_n + slack entries plus those still inside the window
  -- (reservations waiting, entries kept for a Cancel).
  local slack = 8
  if max_n > 64 then slack = math.ceil(max_n / 8) end
  if last and len > max_n + 1 and len % slack < cost then
    local horizon = math.min(now, last) - max_w
    local function at(i)
      -- A malformed entry reads as 0, older than any horizon: trimmed.
      return math.abs(tonumber(redis.call('LINDEX', key, i)) or 0)
    end
    local idx = len - max_n - 1 -- the (max_n + 1)-th newest, from the front
    if at(idx) <= horizon then
      redis.call('LTRIM', key, idx + 1, -1)
    elseif at(0) <= horizon then
      -- Reservations still inside the window: drop the old entries before
      -- them, found by bisection (entry[lo] <= horizon < entry[hi]).
      local lo, hi = 0, idx
      while hi - lo > 1 do
        local mid = math.floor((lo + hi) / 2)
        if at(mid) <= horizon then lo = mid else hi = mid end
      end
      redis.call('LTRIM', key, lo + 1, -1)
    end
  end

  -- Keep a TTL: idle keys vanish once their newest entry, rec, has left
  -- the largest window. Each TTL covers every slot of the half window
  -- ("period") the new entry is in, so only the first entry of each period
  -- pays for a PEXPIRE (an idle log lives at most 1.5 windows); a TTL is
  -- never shortened (GT): another caller's longer window may need it. The
  -- seen mark is set then too, to the period's end: every entry recorded
  -- until the next period's first lies before it. While a learned limit
  -- widens the window (renew), every write renews both: the entries before
  -- it may have set them for the narrower window, in what is now the same
  -- period. (A learned margin widens it too, by a few milliseconds, and
  -- does not: a log idle from the write after the margin was learned until
  -- a window after it could expire up to half a window early.)
  local period = max_w / 2
  if period < 1000 then period = 1000 end
  period = period - period % 1
  local start = rec - rec % period -- the period's start
  if renew or not last or last - last % period < start then
    local ttl = start + period + max_w - now
    ttl = (ttl - ttl % 1000) / 1000 + 1
    if seen then redis.call('SET', seen, string.format('%.0f', start + period), 'PX', ttl) end
    if not last then
      -- The log did not exist: no TTL to keep.
      redis.call('PEXPIRE', key, ttl)
    else
      -- The store's writes give a log a TTL, so it has one: PEXPIRE GT
      -- (Redis 7.0) extends it in one call. GT counts a key without a TTL
      -- (made by another program's RPUSH) as never expiring and leaves it
      -- so: when it declines, which a log of the store's own meets only
      -- where a longer window set a longer TTL, the TTL is read and set if
      -- there is none. An older server answers GT with an error; then the
      -- TTL is read and compared.
      local r = redis.pcall('PEXPIRE', key, ttl, 'GT')
      if r == 0 or type(r) == 'table' and r.err then
        if redis.call('PTTL', key) < ttl then
          redis.call('PEXPIRE', key, ttl)
        end
      end
    end
  end
end
