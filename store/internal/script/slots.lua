-- slots: the keys of a request that lie in another Cluster slot than its
-- own key's (store.Request.Also without a shared hash tag), reserved by a
-- call of their own, one per slot (the Go side: redisstore/slots.go). The
-- keys of such a call are all parts of also: none is the request's own, so
-- no feedback is read and no lease is taken here (the call of the own
-- key's slot does both).
--
-- KEYS      the parts' logs, as also's; a unit here is one counted under
--           another key of the request (store.Part.Key), in that key's
--           slot: its log and sum (never paced: see units).
-- ARGV[1..5] as request's: cost, max wait, now, max server wait (unused),
--           allowance; no limits of its own; then also's tail: the parts,
--           after, rec_after, old, base (0) and len.
--
-- The slot is the earliest that every part allows, never before now +
-- after (the latest slot the request's other slots gave, on this server's
-- clock: see slots.go), and the entry is at the latest of slot +
-- allowance, now + rec_after and every part's last entry, as also's. With
-- old, the call first removes the request's entries at old from every
-- part's log (cancel's cancel_entries; a unit's entry is settled to 0, as
-- its cancel does: settle's settle_unit), then reserves again: a move of
-- the entries to a later time, checked against every window as a new
-- reservation is, in one atomic step.
--
-- Reply: reserve_reply's { allowed, wait, slot, limit, cause, entry };
-- cause AFTER when after set the slot.

-- parts_reserve(now, cost, max_wait, allowance, more) reserves cost units in
-- every part of more and returns the values reserve_reply takes (or
-- KEYSTATE).
local function parts_reserve(now, cost, max_wait, allowance, more)
  if more.old ~= '0' then
    for _, part in ipairs(more) do
      if part.unit then
        settle_unit(part.key, part.sum_key, nil, tonumber(more.old), part.cost, 0, 0, now)
      else
        cancel_entries(part.key, more.old, cost)
      end
    end
  end
  local s, limit, cause, bad = also_slot(more, now, 0, 0, now, cost, max_wait, allowance)
  if bad then return bad end
  local wait = s - now
  if wait > max_wait then return false, wait, nil, limit, cause end
  return true, wait, s, limit, cause, also_record(more, s + allowance, now, cost)
end
