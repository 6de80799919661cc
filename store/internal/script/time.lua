-- time: the clock every script that reads the time shares.

-- clock(arg) is now in microseconds: arg (the client's time), or the
-- server's TIME when arg is "".
local function clock(arg)
  if arg ~= '' then return arg + 0 end
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end
