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
	// tenants holds the active tenants' finish tags and v the key's
	// virtual time (lanes.lua's tens), until tensExpires.
	tenants     map[string]int64
	v           int64
	tensExpires int64
}

// laneSlot is a yielding reservation in the index.
type laneSlot struct {
	slot, entry, allowance int64
	rank                   int64 // the lane, or a tenant's start tag
	cost                   int
	member                 string
}

// laneScan and tenantScan bound the members read to find one that fits
// (LANE_SCAN, TENANT_SCAN).
const laneScan, tenantScan = 16, 64

// tenantFront is TENANT_FRONT: the waiters that bound the virtual time.
const tenantFront = 8

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
// until of a lower lane (with same, or the same; tagged: of a larger start
// tag than rank), of cost units; -1 if none among the first laneScan
// (tagged: tenantScan). A new request sends within the slot's allowance,
// whatever its own; a bumped waiter (same) takes only a slot recorded with
// an allowance at least its own, else a slot at the end.
func (l *memLanes) find(now, until, rank int64, cost int, allowance int64, same, tagged bool, mine string, behind int64) int {
	guard := now + contract.Micros(contract.LaneGuard)
	scan := laneScan
	if tagged {
		scan = tenantScan
		if same {
			guard = now // lane_find: a tenant's bumped waiter takes a slot due at once
		}
	}
	seen, best := 0, -1
	for i := range l.idx {
		s := &l.idx[i]
		if s.slot <= guard {
			continue
		}
		if s.slot > until || seen == scan || best >= 0 && s.slot > l.idx[best].slot {
			return best
		}
		seen++
		later := s.rank < rank || same && s.rank == rank
		if tagged {
			later = s.rank > rank
		}
		if later && mine != "" && contract.MemberTenant(s.member) == mine {
			later = false // a retake skips its tenant's slots (lanes.lua)
		}
		if later && !(same && !tagged && s.rank == rank) && isGap(s.member) {
			later = false // a gap is for its own line alone (lanes.lua)
		}
		if later && behind >= 0 && s.rank == rank {
			if since := contract.MemberSince(s.member); since >= 0 && since <= behind {
				later = false // not behind it in its lane's line (lanes.lua)
			}
		}
		if s.cost == cost && later && (!same || s.allowance >= allowance) {
			if !tagged {
				return i
			}
			// Of a tenant's slots due at one time, the largest tag's.
			if best < 0 || s.rank > l.idx[best].rank {
				best = i
			}
		}
	}
	return best
}

// came is tenant_came: the stored V moved to tag if later.
func (l *memLanes) came(now, tag int64) {
	if l.tensExpires > now {
		l.v = max(l.v, tag)
	}
}

// virtual is tenant_v, last the log's last entry (0: none): V, bounded by
// the front waiters' tags, and V as stored.
func (l *memLanes) virtual(now, last int64) (int64, int64) {
	alive := l.tensExpires > now
	if !alive {
		clear(l.tenants)
		l.v = 0
	}
	guard := now + contract.Micros(contract.LaneGuard)
	front := make([]int64, 0, tenantFront)
	latest := -1 // the latest slot within the guard
	for i := range l.idx {
		if l.idx[i].slot <= guard {
			latest = i
		} else if len(front) < tenantFront {
			front = append(front, l.idx[i].rank)
		} else {
			break
		}
	}
	v := l.v
	if len(front) > 0 || last >= now {
		if latest >= 0 {
			v = max(v, l.idx[latest].rank)
		}
	} else {
		for _, f := range l.tenants {
			v = max(v, f)
		}
	}
	if alive {
		l.v = v
	}
	u := v
	for _, r := range front {
		v = min(v, r)
	}
	return v, u
}

// record is tenant_record: the tenants not past V dropped, the tenant's
// finish tag moved to s + step, V stored, the state kept ttl past now.
func (l *memLanes) record(tenant string, s, step, v, now, ttl int64) {
	if l.tenants == nil {
		l.tenants = make(map[string]int64)
	}
	for t, f := range l.tenants {
		if f <= v {
			delete(l.tenants, t)
		}
	}
	if l.tensExpires <= now || l.v <= v { // ZADD NX after the drop: a V at or below v was dropped
		l.v = v
	}
	l.tenants[tenant] = s + step
	l.tensExpires = max(l.tensExpires, now+ttl)
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
	ten := req.Tenant != ""
	same, rank := false, int64(req.Lane)
	if req.Confirm != "" {
		if _, bumped := l.bumped[req.Confirm]; !bumped {
			l.remove(req.Confirm)
			if ten {
				l.came(now, contract.MemberRank(req.Confirm))
			}
			return contract.Reservation{Allowed: true, Confirmed: true, Key: key, Cost: int32(req.Cost)}
		}
		delete(l.bumped, req.Confirm)
		same = true
		if ten {
			rank = contract.MemberRank(req.Confirm)
			l.virtual(now, m.lastEntry(key, now))
		}
	}
	var v, u int64
	switch {
	case ten && !same && req.Again: // a retake keeps its tag, charged once
		l.virtual(now, m.lastEntry(key, now))
		rank = req.Tag
	case ten && !same:
		v, u = l.virtual(now, m.lastEntry(key, now))
		rank = max(min(v, u-1), 0) // a light tenant: just below V (lanes.lua)
		if f, ok := l.tenants[req.Tenant]; ok && f > v {
			rank = f
		}
	}
	l.drop(now)
	maxWait := contract.MicrosDown(req.MaxWait)
	i := -1
	if req.Lane > 0 || same || ten {
		mine := ""
		if ten && req.Again {
			mine = req.Tenant
		}
		behind := int64(-1)
		if same && !ten {
			behind = contract.MemberSince(req.Confirm)
		}
		i = l.find(now, now+maxWait, rank, req.Cost, contract.Micros(req.Allowance), same, ten, mine, behind)
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
			if !isGap(c.member) { // a gap has no waiter to bump
				l.bumped[c.member] = struct{}{}
				l.expires = max(l.expires, now+(c.entry-now+maxW)/1000*1000+1000)
			}
			if !ten && c.rank < int64(req.Lane) {
				m.laneGap(l, key, c, req, now, maxW, paced)
			}
			res = contract.Reservation{Allowed: true, Cause: contract.CauseOrder, Key: key, Cost: int32(req.Cost),
				Delay: contract.FromMicros(c.slot - now), Slot: c.slot, Entry: c.entry,
				Took: ten && !same || !ten && c.rank < int64(req.Lane)} // lanes.lua's TOOK
		}
	} else {
		res = m.logReserve(key, req, now, maxW, paced)
	}
	if !res.Allowed {
		return res
	}
	if ten {
		res.Tag = rank
		if !same && !req.Again {
			l.record(req.Tenant, rank, req.Step, v, now, (res.Entry-now+maxW)/1000*1000+1000)
		}
	}
	if req.Yield && res.Slot > now+contract.Micros(contract.LaneGuard) {
		token := "m" + strconv.FormatUint(laneSeq.Add(1), 36)
		if ten {
			token = contract.TenantToken(token, req.Tenant)
			res.Yielded = contract.TenantMember(token, rank, &req, res.Entry)
		} else {
			res.Yielded = contract.LineMember(token, &req, res.Slot, res.Entry)
		}
		l.insert(laneSlot{res.Slot, res.Entry, allowance, rank, req.Cost, res.Yielded})
	}
	return res
}

// lastEntry is key's log's last entry (LINDEX key -1), 0 if none; m.mu is
// held.
func (m *Memory) lastEntry(key string, now int64) int64 {
	lg := m.logs[key]
	if lg == nil || lg.expires <= now || lg.head >= len(lg.times) {
		return 0
	}
	return lg.times[len(lg.times)-1]
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

// gapToken starts the token of a gap (lanes.lua's GAP).
const gapToken = "gap~"

// isGap reports whether member is a gap's.
func isGap(member string) bool { return strings.HasPrefix(member, gapToken) }

// laneGap is lane_gap: when a higher lane took c's slot, a slot for the end
// of c's line is reserved at once at the end of the log, recorded as a gap
// (a member without a waiter) that the line's last mover takes; m.mu is
// held.
func (m *Memory) laneGap(l *memLanes, key string, c laneSlot, req contract.Request, now, maxW int64, paced bool) {
	g := req
	g.Cost, g.Allowance, g.MaxWait = c.cost, contract.FromMicros(c.allowance), contract.FromMicros(4*maxW)
	g.Lane, g.Yield, g.Confirm = int(c.rank), false, ""
	res := m.logReserve(key, g, now, maxW, paced)
	if !res.Allowed || res.Slot <= now+contract.Micros(contract.LaneGuard) {
		return
	}
	token := gapToken + "m" + strconv.FormatUint(laneSeq.Add(1), 36)
	member := contract.LaneMember(contract.LaneToken(token, res.Slot), &g, res.Entry)
	l.insert(laneSlot{res.Slot, res.Entry, c.allowance, c.rank, c.cost, member})
}
