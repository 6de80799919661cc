-- lease_close: the end of the algorithm's part (see lease_open): a granted
-- reservation records the caller's lease, to last the lease duration from
-- now (a lease it held already is renewed: its send is still to come).
end

local reply = lease_body()
if reply[1] == 1 then
  redis.call('ZADD', lease_key, now + lease_dur, lease_id)
  expire(lease_key, now + lease_dur, now)
end
return reply
