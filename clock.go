package throttle

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttle-go/throttle/store"
)

// This file maps the store's clock onto this process's, so that a request
// wakes at its slot, and measures how late it is, to within the fastest
// recent round trip to the store rather than the one that gave it the slot.
//
// The store decides a reservation at its clock's decided (the slot less
// Delay), which it read between the ask and the reply: so the offset
// θ = store − local lay within [decided − replied, decided − asked] then. One
// such sample is as wide as its round trip (queueing in the pool, the
// network, Redis busy), and a slot placed with it alone is due no earlier
// than asked + Delay and no later than replied + Delay: what a request
// without this map measures from and wakes at. The samples of one clock
// intersect, so the bounds narrow to the fastest recent round trip: bounds
// from an earlier sample widen by the most two clocks drift apart over the
// time between (clockDrift), and last maxClockAge; a sample that misses
// them (a step of either clock, a failover to another server) starts them
// anew.
//
// A request's lateness then has two parts: how long after the latest time
// its slot may be it went (its own: a wake-up, a dial), and the bounds'
// width (what is not known of the clocks). A reservation adds the width as
// it is when it asks (spread) to the process's allowance, which learns the
// rest (lateness.go): the first part, and what the width was beyond the
// spread. So a wide first sample, made before any bounds, does not hold
// every reservation back after the bounds have narrowed.
//
// One store server is one clock (an in-process store's is this process's,
// which does not drift). A sharded store (a Redis Cluster or Ring)
// has one per server, which a key does not name, so its bounds are kept per
// rate key; so are a store's that does not say it is not sharded.

// clockDrift bounds how fast two clocks drift apart, in parts per million:
// NTP slews each by at most 500 ppm.
const clockDrift = 1000

// maxClockAge is how long bounds hold without a new sample: older, they
// have aged wider than a sample's own round trip.
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
	width  atomic.Int64 // the last sample's own width (ns): its round trip

	mu   sync.Mutex
	keys map[string]offset
}

func newStoreClock(st store.Store) *storeClock {
	c := &storeClock{perKey: true, drift: clockDrift, base: time.Now()}
	switch s := st.(type) {
	case *store.Memory:
		c.perKey, c.drift = false, 0
	case interface{ Sharded() bool }:
		c.perKey = s.Sharded()
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
// clocks' bounds will leave unknown: their width, aged to now as the
// reply's sample will find them (ok), or, without fresh ones, the last
// sample's own round trip.
func (s *storeClock) spread(key string, now time.Time) (d time.Duration, ok bool) {
	t := s.ns(now)
	if o, ok := s.get(key, t); ok {
		o = o.aged(t, s.drift)
		return time.Duration(o.hi - o.lo), true
	}
	return time.Duration(s.width.Load()), false
}

// place returns when the slot of res, granted for key by the shared store
// to a call made at asked and answered at replied, falls on this process's
// clock: no earlier than due and no later than at. A reservation whose
// store does not say when it decided is placed with its own round trip.
func (s *storeClock) place(key string, res store.Reservation, asked, replied time.Time) (due, at time.Time) {
	d := res.Decided()
	if d == 0 {
		return asked.Add(res.Delay), replied.Add(res.Delay)
	}
	c := d * 1000
	a, r := s.ns(asked), s.ns(replied)
	s.width.Store(r - a)
	o := s.narrow(key, offset{lo: c - r, hi: c - a, at: r})
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
func (s *storeClock) replace(a *admission, now time.Time) {
	if a.storeSlot == 0 {
		return
	}
	o, ok := s.get(a.k.skey, s.ns(now))
	if !ok {
		return
	}
	due, at := s.span(o, a.storeSlot*1000)
	a.slot, a.latest = maxTime(a.slot, due), minTime(a.latest, at)
}

// narrow intersects key's bounds, aged, with the sample n, keeps the
// result, and returns it.
func (s *storeClock) narrow(key string, n offset) offset {
	if !s.perKey {
		key = ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.keys[key]; ok {
		older, newer := o, n // age the older bounds to the newer's time
		if n.at < o.at {
			older, newer = n, o
		}
		n = newer
		if newer.at-older.at <= int64(maxClockAge) {
			g := older.aged(newer.at, s.drift)
			if lo, hi := max(g.lo, newer.lo), min(g.hi, newer.hi); lo <= hi {
				n = offset{lo: lo, hi: hi, at: newer.at}
			}
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
