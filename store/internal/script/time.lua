-- time: the clock and the TTL every script that writes shares.

-- clock(arg) is now in microseconds: arg (the client's time), or the
-- server's TIME when arg is "".
local function clock(arg)
  if arg ~= '' then return arg + 0 end
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

-- expire keeps key until at least till (microseconds) from now: a TTL is
-- never shortened, since another caller's longer window may need it.
local function expire(key, till, now)
  local ttl = math.floor((till - now) / 1000) + 1
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, string.format('%.0f', ttl))
  end
end
