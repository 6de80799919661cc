-- floor: the index of the window or bucket of a time.

-- idx(t, l) is floor(t / l), exact for the integers a double holds.
local function idx(t, l)
  local k = math.floor(t / l)
  if k * l > t then k = k - 1 elseif (k + 1) * l <= t then k = k + 1 end
  return k
end
