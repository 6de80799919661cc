package contract

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// This file is the units of a request (Part.Unit): a cost per limit, each
// distinct unit (tokens, points) counted in a log of its own beside the
// key's, one weighted entry per request, and the settlement of that entry
// once the response says what the upstream charged (Settler).

// Unit is what Cancel and Settle need of one unit of an allowed
// reservation: its name, the key it is counted under (Part.Key: empty for
// the reservation's own), the cost recorded (the estimate), and the
// spacing of its paced limit in microseconds (0: none).
type Unit struct {
	Name    string
	Key     string
	Cost    int64
	Spacing int64
}

// UnitEntry is the entry of res's unit u: that of the key it is counted
// under (Reservation.AlsoEntries), where its log records the request.
func (res *Reservation) UnitEntry(u Unit) int64 {
	if u.Key != "" && res.AlsoEntries != nil {
		for i, k := range res.AlsoKeys {
			if k == u.Key {
				return res.AlsoEntries[i]
			}
		}
	}
	return res.Entry
}

// Settler changes the cost a reservation recorded in its units.
type Settler interface {
	// Settle replaces the cost of each unit of an allowed reservation
	// (res.Units[i].Cost, the estimate) by actual[i] (>= 0), in one atomic
	// step: a window limit's entry takes the new weight (a refund loosens
	// every window; an overrun moves the slots of later reservations), a
	// paced limit's time moves by (actual - estimate) spacings, a refund
	// only while no later reservation was made on it (docs/costs.md). An
	// entry that has left the log is left alone. Call it at most once per
	// reservation.
	Settle(ctx context.Context, res Reservation, actual []int64) error
}

// MaxUnitName bounds the length of a unit's name.
const MaxUnitName = 64

// unitValid reports whether p is a well-formed unit part of a request.
func unitValid(p *Part) bool {
	return unitInvalid(p) == ""
}

// unitInvalid says what is wrong with the unit part p, "" if nothing.
func unitInvalid(p *Part) string {
	switch {
	case len(p.Unit) > MaxUnitName || strings.ContainsAny(p.Unit, "{}\x00"):
		return fmt.Sprintf("unit name %q: at most %d bytes, without braces", p.Unit, MaxUnitName)
	case p.Cost < 0 || p.Cost > math.MaxInt32:
		return fmt.Sprintf("unit %q: cost %d outside 0..%d", p.Unit, p.Cost, math.MaxInt32)
	case len(p.Limits) == 0:
		return fmt.Sprintf("unit %q: no limits", p.Unit)
	}
	paced := false
	for _, l := range p.Limits {
		switch {
		case l.N < 1 || l.Per < time.Microsecond:
			return fmt.Sprintf("unit %q: limit %s: N must be >= 1 and Per >= 1µs", p.Unit, l)
		case p.Cost > l.N:
			return fmt.Sprintf("unit %q: cost %d exceeds limit %s", p.Unit, p.Cost, l)
		case l.Precision != 0 || l.SlowStart:
			return fmt.Sprintf("unit %q: limit %s: no Precision or SlowStart", p.Unit, l)
		case !l.Paced && l.Burst != 0:
			return fmt.Sprintf("unit %q: limit %s: Burst is for a paced limit", p.Unit, l)
		case l.Paced && (paced || l.Burst < 0 || l.Burst > l.N || p.Cost > l.Burst+1):
			return fmt.Sprintf("unit %q: limit %s: at most one paced limit, Burst 0..N, cost %d <= Burst+1", p.Unit, l, p.Cost)
		}
		paced = paced || l.Paced
	}
	return ""
}

// UnitPace returns the index of p's paced limit, -1 if none.
func (p *Part) UnitPace() int {
	for i := range p.Limits {
		if p.Limits[i].Paced {
			return i
		}
	}
	return -1
}

// UnitWindow is how long a unit's log keeps an entry, in microseconds: its
// longest window, paced or not.
func (p *Part) UnitWindow() int64 {
	var w int64
	for _, l := range p.Limits {
		w = max(w, Micros(l.Per))
	}
	return w
}

// UnitsOf returns the units of req's unit parts, in order, for Cancel and
// Settle; nil when it has none.
func (r *Request) UnitsOf() []Unit {
	var out []Unit
	for i := range r.Also {
		p := &r.Also[i]
		if p.Unit == "" {
			continue
		}
		u := Unit{Name: p.Unit, Key: p.Key, Cost: int64(p.Cost)}
		if j := p.UnitPace(); j >= 0 {
			u.Spacing = p.Limits[j].Interval()
		}
		out = append(out, u)
	}
	return out
}

// ErrInvalidSettle is returned, wrapped, for a settlement no store could
// make: a reservation not allowed or without units, or actual costs of
// another count or below 0.
var ErrInvalidSettle = fmt.Errorf("%w: invalid settlement", ErrInvalidRequest)

// ValidSettle checks a settlement of res with actual.
func ValidSettle(res Reservation, actual []int64) error {
	if !res.Allowed || len(res.Units) == 0 {
		return fmt.Errorf("%w: the reservation has no units", ErrInvalidSettle)
	}
	if len(actual) != len(res.Units) {
		return fmt.Errorf("%w: %d actual costs for %d units", ErrInvalidSettle, len(actual), len(res.Units))
	}
	for i, a := range actual {
		if a < 0 || a > math.MaxInt32 {
			return fmt.Errorf("%w: unit %q: actual cost %d outside 0..%d", ErrInvalidSettle, res.Units[i].Name, a, math.MaxInt32)
		}
	}
	return nil
}
