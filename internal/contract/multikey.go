package contract

import (
	"fmt"
	"time"
)

// Part is one more rate key of a request, with its own limits (see
// Request.Also): e.g. an app-wide limit beside a per-token one.
type Part struct {
	// Key is the rate key. On a Redis Cluster or Ring, keys that share the
	// request's own key's hash tag ("{tag}" at the start of each) are
	// reserved with it in one call; the others take one call per slot.
	Key string
	// Limits must all admit the request under Key: window limits only (no
	// Paced, no Precision), each with N >= the request's Cost. A unit part
	// may hold one paced limit too (Cost <= its Burst+1).
	Limits []Limit
	// Unit, if set, makes the part count a unit of its own (tokens,
	// points) under a key of the request: its own when Key is empty, else
	// Key, which must be the Key of a part of the request without a Unit
	// (and the unit then takes window limits only). The store keeps the
	// unit's log (and its paced time) beside that key's log, under its
	// hash tag. The request costs Cost units there (0 <= Cost <= every N),
	// recorded as one entry of that weight: a unit's log holds one entry
	// per request, whatever its N (units.go). Settle changes it later.
	Unit string
	Cost int
}

// validAlso is invalidAlso without the error, for the hot path.
func (r *Request) validAlso(key string) bool {
	if r.Algorithm != SlidingLog || len(r.Also) == 0 {
		return false
	}
	for i := range r.Also {
		p := &r.Also[i]
		if p.Unit != "" {
			for j := range i {
				if r.Also[j].Unit == p.Unit && r.Also[j].Key == p.Key {
					return false
				}
			}
			if !unitValid(p) || p.Key != "" && !r.unitKeyValid(p) {
				return false
			}
			continue
		}
		if p.Key == "" || p.Key == key || len(p.Limits) == 0 || p.Cost != 0 {
			return false
		}
		for j := range i {
			if r.Also[j].Key == p.Key {
				return false
			}
		}
		for k := range p.Limits {
			l := &p.Limits[k]
			if l.N < 1 || l.Per < time.Microsecond || r.Cost > l.N || l.Paced || l.Burst != 0 || l.SlowStart || l.Precision != 0 {
				return false
			}
		}
	}
	return true
}

// invalidAlso returns the error of the first rule r.Also breaks, nil if none.
func (r Request) invalidAlso(key string) error {
	if r.Also == nil {
		return nil
	}
	if len(r.Also) == 0 {
		return fmt.Errorf("%w: Also is empty (nil for none)", ErrInvalidRequest)
	}
	if r.Algorithm != SlidingLog {
		return fmt.Errorf("%w: more keys (Also) need the log algorithm, not %s", ErrInvalidRequest, r.Algorithm)
	}
	for i, p := range r.Also {
		if p.Unit != "" {
			for j := range i {
				if r.Also[j].Unit == p.Unit && r.Also[j].Key == p.Key {
					return fmt.Errorf("%w: Also[%d]: the unit %q of Also[%d] again", ErrInvalidRequest, i, p.Unit, j)
				}
			}
			if why := unitInvalid(&p); why != "" {
				return fmt.Errorf("%w: Also[%d]: %s", ErrInvalidRequest, i, why)
			}
			if p.Key != "" && !r.unitKeyValid(&p) {
				return fmt.Errorf("%w: Also[%d]: unit %q under key %q: the key must be another part's, without a Unit, and the unit's limits window limits",
					ErrInvalidRequest, i, p.Unit, p.Key)
			}
			continue
		}
		switch {
		case p.Cost != 0:
			return fmt.Errorf("%w: Also[%d]: a Cost is for a unit part", ErrInvalidRequest, i)
		case p.Key == "":
			return fmt.Errorf("%w: Also[%d]: empty key", ErrInvalidRequest, i)
		case p.Key == key:
			return fmt.Errorf("%w: Also[%d]: the request's own key again", ErrInvalidRequest, i)
		case len(p.Limits) == 0:
			return fmt.Errorf("%w: Also[%d]: no limits", ErrInvalidRequest, i)
		}
		for j := range i {
			if r.Also[j].Key == p.Key {
				return fmt.Errorf("%w: Also[%d]: the key of Also[%d] again", ErrInvalidRequest, i, j)
			}
		}
		for _, l := range p.Limits {
			switch {
			case l.N < 1 || l.Per < time.Microsecond:
				return fmt.Errorf("%w: Also[%d]: limit %s: N must be >= 1 and Per >= 1µs", ErrInvalidRequest, i, l)
			case r.Cost > l.N:
				return fmt.Errorf("%w: Also[%d]: cost %d exceeds limit %s", ErrInvalidRequest, i, r.Cost, l)
			case l.Paced || l.Burst != 0 || l.SlowStart || l.Precision != 0:
				return fmt.Errorf("%w: Also[%d]: limit %s: only window limits (no Paced, Burst, SlowStart or Precision)", ErrInvalidRequest, i, l)
			}
		}
	}
	return nil
}

// unitKeyValid reports whether the unit part p, under a key of the request
// other than its own, names the key of a part without a Unit and holds
// window limits only (a paced unit's time is not moved between Cluster
// slots: slots.go).
func (r *Request) unitKeyValid(p *Part) bool {
	if p.UnitPace() >= 0 {
		return false
	}
	for i := range r.Also {
		if q := &r.Also[i]; q.Unit == "" && q.Key == p.Key {
			return true
		}
	}
	return false
}

// PartOf maps a 1-based limit number over the request's limits, then those
// of each part in turn (the script's reply), to Reservation.Part and Limit.
func (r *Request) PartOf(n int) (part, limit int, ok bool) {
	n-- // 0-based
	if n < len(r.Limits) {
		return 0, n, n >= 0
	}
	n -= len(r.Limits)
	for i, p := range r.Also {
		if n < len(p.Limits) {
			return i + 1, n, true
		}
		n -= len(p.Limits)
	}
	return 0, 0, false
}

// AlsoNames returns the keys of the parts that are not units, for Cancel;
// nil when there are none.
func (r *Request) AlsoNames() []string {
	var keys []string
	for _, p := range r.Also {
		if p.Unit == "" {
			keys = append(keys, p.Key)
		}
	}
	return keys
}

// LimitNumber reports whether n numbers a limit of req (see partOf).
func (r *Request) LimitNumber(n int64) bool {
	_, _, ok := r.PartOf(int(n))
	return ok
}
