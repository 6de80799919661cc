package engine

import (
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file maps the store's clock onto this process's, so that a request
// wakes at its slot, and measures how late it is, to within the fastest
// recent round trip to the store rather than the one that gave it the slot.
//
// What a reply says. The store decides a reservation at its clock's decided
// (the slot less Delay), which it read between the ask and the reply: so
// the offset θ = store − local lay within [decided − replied, decided −
// asked] then. That holds however long the reply took: a slow one (a busy
// pool, Redis paused or busy) is a wide sample, true but vague; it says
// where the store's clock is, not how late this process sends. A slot
// placed with one sample alone is due no earlier than asked + Delay and no
// later than replied + Delay: what a request without this map measures
// from and wakes at.
//
// What the bounds are. The samples of one clock intersect, so the bounds
// narrow to the fastest recent round trip. Bounds from an earlier sample
// still hold θ, widened by the most two clocks drift apart over the time
// between (clockDrift): age makes them vaguer, never wrong, so a new sample
// always meets them, however old they are. After a stall (no reply for a
// second, then replies a second wide) the bounds are those of before it,
// widened by 2ms a second, not the stall's replies. Only a sample that
// misses them (a step of either clock, a failover to another server) starts
// them anew.
//
// What a request's lateness is. It has two parts: how long after the latest
// time its slot may be, as the bounds stand when it wakes (or gets its
// connection), it went: a wake-up, a dial, its own; and the bounds' width
// then: what is not known of the clocks. The allowance learns only the
// first (admission.own, lateness.go); a reservation adds the width as it
// will be (spread): the bounds' width aged to when it asks, which the
// reply narrows or, when it is slow, leaves aged by the drift over its
// round trip (2µs a millisecond); for bounds with no sample in the last maxClockAge,
// no more than a recent round trip (the last, but at most 4 × the fastest
// of the recent ones: one slow reply says nothing of the next). A request
// whose reply leaves the bounds wider than its spread (a slow reply with no
// narrower bounds to meet) is later than its allowance by as much, and
// retakes its slot when that passes its rule's retake: a slow reply costs
// that request a retake, never the allowance of later ones, nor a place in
// a pace shared by the fleet.
//
// One store server is one clock (an in-process store's is this process's,
// which does not drift). A sharded store (a Redis Cluster or Ring)
// has one per server, which a key does not name, so its bounds are kept per
// rate key; so are a store's that does not say it is not sharded.

// clockDrift bounds how fast two clocks drift apart, in parts per million:
// NTP slews each by at most 500 ppm.
const clockDrift = 1000

// maxClockAge is how long bounds are taken as fresh without a new sample:
// aged until then, they are about as narrow as a sample's own round trip
// (2ms at clockDrift), and a reservation adds their width as it is; older,
// it adds no more than a recent round trip. It is also the period of the
// fastest round trip kept (trips).
const maxClockAge = time.Second

// maxClocks bounds the keys whose bounds are kept.
const maxClocks = 4096

// offset bounds θ = store − local, in nanoseconds, as of at (nanoseconds
// since storeClock.base).
type offset struct{ lo, hi, at int64 }

// aged returns o as of t: wider by drift (ppm) since o.at.
func (o offset) aged(t, drift int64) offset {
	w := max(t-o.at, 0) * drift / 1e6
	return offset{lo: o.lo - w, hi: o.hi + w, at: max(t, o.at)}
}

// storeClock is the offset of the shared store's clock.
type storeClock struct {
	perKey bool
	drift  int64 // ppm: clockDrift, or 0 for an in-process store (this process's clock)
	base   time.Time

	mu    sync.Mutex
	keys  map[string]offset
	trips trips
}

// trips keeps the recent round trips of calls to the store (ns): the last,
// and the fastest of the current period (maxClockAge) and of the last
// earlier one with samples (so that after a stall, when the first samples
// of a new period are the stall's, those of before it still count).
type trips struct {
	last, cur, prev int64
	start           int64 // the current period's start (ns)
	has, hasPrev    bool
}

// add records a round trip rt that ended at t.
func (r *trips) add(t, rt int64) {
	switch {
	case !r.has || t-r.start >= int64(maxClockAge):
		r.prev, r.hasPrev = r.cur, r.has
		r.cur, r.start, r.has = rt, t, true
	default:
		r.cur = min(r.cur, rt)
	}
	r.last = rt
}

// typical is what the next round trip may take: the last, but no more than
// 4 × the fastest recent one (a stall's reply says nothing of the next).
func (r *trips) typical() int64 {
	f := r.cur
	if r.hasPrev {
		f = min(f, r.prev)
	}
	return min(r.last, 4*f)
}

func newStoreClock(st contract.Store, now time.Time) *storeClock {
	c := &storeClock{perKey: true, drift: clockDrift, base: now}
	caps := st.Caps()
	c.perKey = !caps.OneClock
	if caps.InProcess {
		c.drift = 0
	}
	return c
}

// ns is t on the offset's scale.
func (s *storeClock) ns(t time.Time) int64 { return t.Sub(s.base).Nanoseconds() }

// get returns key's bounds, if they are fresh at t.
func (s *storeClock) get(key string, t int64) (offset, bool) {
	if !s.perKey {
		key = ""
	}
	s.mu.Lock()
	o, ok := s.keys[key]
	s.mu.Unlock()
	if !ok || t-o.at > int64(maxClockAge) {
		return offset{}, false
	}
	return o, true
}

// spread is how much of a reservation's lateness, made for key at now, the
// clocks' bounds will leave unknown: their width aged to now, which the
// reply's sample narrows (or ages a little further); for bounds older than maxClockAge, or
// none, no more than a recent round trip (trips.typical), which the reply's
// sample will be about as wide as.
func (s *storeClock) spread(key string, now time.Time) time.Duration {
	if !s.perKey {
		key = ""
	}
	t := s.ns(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	rt := s.trips.typical()
	o, ok := s.keys[key]
	if !ok {
		return time.Duration(rt)
	}
	g := o.aged(t, s.drift)
	w := g.hi - g.lo
	if t-o.at > int64(maxClockAge) {
		w = min(w, rt)
	}
	return time.Duration(w)
}

// place returns when the slot of res, granted for key by the shared store
// to a call made at asked and answered at replied, falls on this process's
// clock: no earlier than due and no later than at. A reservation whose
// store does not say when it decided is placed with its own round trip.
func (s *storeClock) place(key string, res contract.Reservation, asked, replied time.Time) (due, at time.Time) {
	d := res.Decided()
	if d == 0 {
		return asked.Add(res.Delay), replied.Add(res.Delay)
	}
	c := d * 1000
	a, r := s.ns(asked), s.ns(replied)
	o := s.narrow(key, offset{lo: c - r, hi: c - a, at: r}, r-a)
	return s.span(o, c+res.Delay.Nanoseconds())
}

// span returns the earliest and the latest local times of the store's
// instant slot (ns) by the bounds o. Like the store's Delay, which a waiter
// sleeps on its own clock, it takes the clocks to run at one rate until the
// slot: the drift counts only where samples of different times meet.
func (s *storeClock) span(o offset, slot int64) (time.Time, time.Time) {
	return s.base.Add(time.Duration(slot - o.hi)), s.base.Add(time.Duration(slot - o.lo))
}

// replace tightens a's placing (due, at) by the bounds as they are at now:
// narrower, often, than when the slot was placed, for a waiter learns from
// the replies that came while it slept.
func (s *storeClock) replace(a *Admission, now time.Time) {
	if a.storeSlot == 0 {
		return
	}
	o, ok := s.get(a.k.Key, s.ns(now))
	if !ok {
		return
	}
	due, at := s.span(o, a.storeSlot*1000)
	a.slot, a.latest = maxTime(a.slot, due), minTime(a.latest, at)
}

// narrow intersects key's bounds, aged, with the sample n of a call that
// took rt, keeps the result, and returns it. Bounds of any age meet the
// sample: aged, they still hold θ. A sample that misses them starts them
// anew (the older of the two is dropped: the clock stepped between them).
func (s *storeClock) narrow(key string, n offset, rt int64) offset {
	if !s.perKey {
		key = ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trips.add(n.at, rt)
	if o, ok := s.keys[key]; ok {
		older, newer := o, n // age the older bounds to the newer's time
		if n.at < o.at {
			older, newer = n, o
		}
		n = newer
		g := older.aged(newer.at, s.drift)
		if lo, hi := max(g.lo, newer.lo), min(g.hi, newer.hi); lo <= hi {
			n = offset{lo: lo, hi: hi, at: newer.at}
		}
	}
	if s.keys == nil || len(s.keys) >= maxClocks {
		s.keys = make(map[string]offset)
	}
	s.keys[key] = n
	return n
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
