package memstore

import (
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/throttle-go/throttle/internal/contract"
)

// Priority lanes, as lanes.lua: a key's index of yielding slots (ordered
// as Redis orders a ZSET: by slot, then member) and its bumped set.

// memLanes is one key's lanes.
type memLanes struct {
	idx    []laneSlot
	bumped map[string]struct{}
	// expires is when bumped is gone, as the SET's TTL: each bump keeps
	// it past the slot it took.
	expires int64
}

// laneSlot is a yielding reservation in the index.
type laneSlot struct {
	slot, entry, allowance int64
	lane, cost             int
	member                 string
}

// laneScan bounds the members read to find one that fits (LANE_SCAN).
const laneScan = 16

// laneSeq numbers the tokens of yielding reservations.
var laneSeq atomic.Uint64

// lanesOf returns key's lanes, made if missing; m.mu is held.
func (m *Memory) lanesOf(key string) *memLanes {
	if m.lanes == nil {
		m.lanes = make(map[string]*memLanes)
	}
	l := m.lanes[key]
	if l == nil {
		l = &memLanes{bumped: make(map[string]struct{})}
		m.lanes[key] = l
	}
	return l
}

// remove drops member from the index; it reports whether it was there.
func (l *memLanes) remove(member string) bool {
	for i := range l.idx {
		if l.idx[i].member == member {
			l.idx = slices.Delete(l.idx, i, i+1)
			return true
		}
	}
	return false
}

// drop forgets the slots before now (none can be taken), and the bumped
// set when its TTL ran out.
func (l *memLanes) drop(now int64) {
	i := 0
	for i < len(l.idx) && l.idx[i].slot < now {
		i++
	}
	l.idx = slices.Delete(l.idx, 0, i)
	if l.expires <= now {
		clear(l.bumped)
	}
}

// find is lane_find: the earliest slot after now + LaneGuard and at most
// until of a lower lane (with same, or the same), of cost units, whose
// allowance is at least allowance; -1 if none among the first laneScan.
func (l *memLanes) find(now, until int64, lane, cost int, allowance int64, same bool) int {
	guard := now + contract.Micros(contract.LaneGuard)
	seen := 0
	for i := range l.idx {
		s := &l.idx[i]
		if s.slot <= guard {
			continue
		}
		if s.slot > until || seen == laneScan {
			return -1
		}
		seen++
		if s.cost == cost && (s.lane < lane || same && s.lane == lane) && s.allowance >= allowance {
			return i
		}
	}
	return -1
}

// insert adds a yielding reservation in Redis's order.
func (l *memLanes) insert(s laneSlot) {
	i, _ := slices.BinarySearchFunc(l.idx, s, func(a, b laneSlot) int {
		if a.slot != b.slot {
			if a.slot < b.slot {
				return -1
			}
			return 1
		}
		return strings.Compare(a.member, b.member)
	})
	l.idx = slices.Insert(l.idx, i, s)
}

// reserveLanes is lanes.lua's lane_reserve; m.mu is held.
func (m *Memory) reserveLanes(key string, req contract.Request, now, maxW int64, paced bool) contract.Reservation {
	l := m.lanesOf(key)
	if l.expires <= now {
		clear(l.bumped)
	}
	same := false
	if req.Confirm != "" {
		if _, bumped := l.bumped[req.Confirm]; !bumped {
			l.remove(req.Confirm)
			return contract.Reservation{Allowed: true, Confirmed: true, Key: key, Cost: int32(req.Cost)}
		}
		delete(l.bumped, req.Confirm)
		same = true
	}
	l.drop(now)
	maxWait := contract.MicrosDown(req.MaxWait)
	i := -1
	if req.Lane > 0 || same {
		i = l.find(now, now+maxWait, req.Lane, req.Cost, contract.Micros(req.Allowance), same)
	}
	req.Allowance = req.YieldAllowance() // from here on, the allowance it is recorded with
	allowance := contract.Micros(req.Allowance)
	var res contract.Reservation
	if i >= 0 {
		c := l.idx[i]
		own := req
		own.MaxWait = contract.FromMicros(c.slot - now)
		res = m.logReserve(key, own, now, maxW, paced)
		if !res.Allowed && res.Cause == contract.CauseUpstream {
			res, i = m.logReserve(key, req, now, maxW, paced), -1
		}
		if !res.Allowed && i >= 0 {
			l.idx = slices.Delete(l.idx, i, i+1)
			l.bumped[c.member] = struct{}{}
			l.expires = max(l.expires, now+(c.entry-now+maxW)/1000*1000+1000)
			res = contract.Reservation{Allowed: true, Cause: contract.CauseOrder, Key: key, Cost: int32(req.Cost),
				Delay: contract.FromMicros(c.slot - now), Slot: c.slot, Entry: c.entry, Took: true}
		}
	} else {
		res = m.logReserve(key, req, now, maxW, paced)
	}
	if res.Allowed && req.Yield && res.Slot > now+contract.Micros(contract.LaneGuard) {
		res.Yielded = contract.LaneMember("m"+strconv.FormatUint(laneSeq.Add(1), 36), &req, res.Entry)
		l.insert(laneSlot{res.Slot, res.Entry, allowance, req.Lane, req.Cost, res.Yielded})
	}
	return res
}

// logReserve is one reservation of key's log (log.lua); m.mu is held.
func (m *Memory) logReserve(key string, req contract.Request, now, maxW int64, paced bool) (res contract.Reservation) {
	m.repairFar(key, &req, now, maxW) // keystate.go
	c := logCall{m: m, req: req, key: key, now: now, maxW: maxW, windows: !paced || maxW > 0}
	c.reserve(&res, paced)
	return res
}

// cancelLanes is the part of Cancel for a yielding reservation: false when
// a higher lane took its slot (nothing is to be removed); m.mu is held.
func (m *Memory) cancelLanes(res contract.Reservation) bool {
	l := m.lanes[res.Key]
	if l == nil {
		return true
	}
	if _, bumped := l.bumped[res.Yielded]; bumped {
		delete(l.bumped, res.Yielded)
		return false
	}
	l.remove(res.Yielded)
	return true
}
