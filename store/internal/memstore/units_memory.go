package memstore

import (
	"context"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is the Memory store's twin of units.lua and settle.lua: a unit
// of its own (contract.Part.Unit) counted beside the key's log, one
// weighted entry per request, and its settlement.

// memUnit is the log of one unit of a key: the times the requests were
// recorded at and their weights, oldest first, live from head on.
type memUnit struct {
	times, weights []int64
	head           int
	expires        int64
}

// unitName is the name of a unit's state in the store's maps (its log in
// units, its paced time in paces): beside the key's own.
func unitName(key, unit string) string { return key + "\x00u:" + unit }

// openUnit returns the unit log of name, trimmed at now against w, made
// when missing; m.mu is held.
func (m *Memory) openUnit(name string, now, w int64) *memUnit {
	if m.units == nil {
		m.units = make(map[string]*memUnit)
	}
	u := m.units[name]
	if u != nil && u.expires <= now {
		u = nil
	}
	if u == nil {
		u = &memUnit{}
		m.units[name] = u
	}
	if n := len(u.times); n > u.head {
		horizon := min(now, u.times[n-1]) - w
		for u.head < n && u.times[u.head] <= horizon {
			u.head++
		}
		if u.head > 32 && u.head*2 > n {
			u.times, u.weights = append(u.times[:0], u.times[u.head:]...), append(u.weights[:0], u.weights[u.head:]...)
			u.head = 0
		}
	}
	return u
}

// last returns the newest time of u, 0 when empty.
func (u *memUnit) last() int64 {
	if n := len(u.times); n > u.head {
		return u.times[n-1]
	}
	return 0
}

// unitCall is one unit part of a reservation in progress.
type unitCall struct {
	name string
	p    *contract.Part
	u    *memUnit
	ps   *memPace // the paced time, nil when not paced
	tat  int64    // its TAT (0: none)
	t    int64    // its spacing
}

// unitSlot is units.lua's unit_slot: s raised to what the unit part p of
// key (or of p.Key, when set) allows, its limits numbered from part; m.mu
// is held.
func (m *Memory) unitSlot(key string, p *contract.Part, part int, now int64, s *slot) *unitCall {
	if p.Key != "" {
		key = p.Key
	}
	name := unitName(key, p.Unit)
	c := &unitCall{name: name, p: p, u: m.openUnit(name, now, p.UnitWindow())}
	cost := int64(p.Cost)
	if i := p.UnitPace(); i >= 0 {
		l := &p.Limits[i]
		c.ps, c.tat = m.paceState(name, now)
		c.t = l.Interval()
		if c.tat > 0 {
			s.raise(c.tat+(cost-1-int64(l.Burst))*c.t, part, i, contract.CauseLimit)
		}
	}
	live := len(c.u.times) - c.u.head
	for i := range p.Limits {
		l := &p.Limits[i]
		if l.Paced {
			continue
		}
		n, w := int64(l.N), contract.Micros(l.Per)
		var sum int64
		for j := c.u.head + live - 1; j >= c.u.head; j-- {
			e := c.u.times[j]
			if e+w <= now {
				break
			}
			sum += c.u.weights[j]
			if sum > n-cost {
				s.raise(e+w, part, i, contract.CauseLimit)
				break
			}
		}
	}
	return c
}

// record is units.lua's unit_record: the weighted entry at rec, the TTL,
// the paced time.
func (c *unitCall) record(rec int64) {
	c.u.times = append(c.u.times, rec)
	c.u.weights = append(c.u.weights, int64(c.p.Cost))
	c.u.expires = max(c.u.expires, rec+c.p.UnitWindow()+1000)
	if c.ps != nil {
		c.ps.tat = max(c.tat, rec) + int64(c.p.Cost)*c.t
		c.ps.expires = c.ps.tat + 1000
	}
}

// settleUnit is settle.lua's settle_unit: the newest entry (rec, est) of
// the unit's log, under key or u.Key when set, takes the weight actual, and
// its paced time moves by (actual - est) spacings, a refund only while the
// entry is the newest; m.mu is held.
func (m *Memory) settleUnit(key string, u contract.Unit, rec, actual, now int64) bool {
	if u.Key != "" {
		key = u.Key
	}
	name := unitName(key, u.Name)
	lg := m.units[name]
	if lg == nil || lg.expires <= now {
		return false
	}
	i := len(lg.times) - 1
	for i >= lg.head && lg.times[i] > rec {
		i--
	}
	for i >= lg.head && lg.times[i] == rec && lg.weights[i] != u.Cost {
		i--
	}
	if i < lg.head || lg.times[i] != rec {
		return false
	}
	lg.weights[i] = actual
	d := actual - u.Cost
	if u.Spacing > 0 && (d > 0 || d < 0 && i == len(lg.times)-1) {
		ps, tat := m.paceState(name, now)
		if tat > 0 || d > 0 {
			ps.tat = max(tat, now) + d*u.Spacing
			ps.expires = ps.tat + 1000
			if ps.tat <= now {
				delete(m.paces, name)
			}
		}
	}
	return true
}

// Settle implements contract.Settler.
func (m *Memory) Settle(_ context.Context, res contract.Reservation, actual []int64) error {
	if err := contract.ValidSettle(res, actual); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.micros()
	for i, u := range res.Units {
		m.settleUnit(res.Key, u, res.UnitEntry(u), actual[i], now)
	}
	return nil
}
