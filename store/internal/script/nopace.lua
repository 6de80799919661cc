-- nopace: the plain log's layout: no paced limit, the window limits from
-- ARGV[6] (see log).

local first, pace = 6, nil
