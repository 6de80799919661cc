package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is the cap on requests in flight (Plan.InFlight): the lease a
// request takes with its slot, waits for in the key's queue when none is
// free, renews while it is in flight, and gives back when its response body
// is closed (Hold.Release). docs/concurrency.md has the design and its costs.

// LeaseCounters count the leases of a rule's name; Stats reads them.
type LeaseCounters struct {
	Held                    atomic.Int64 // held now
	Queued, Lost, Reclaimed atomic.Uint64
}

// longestHold bounds how long a response body holds its request's lease, in
// LeaseFor: one never closed gives the lease back after it (renewed every
// half LeaseFor, so twice as many renewals).
const longestHold = 10

// shareOfCap cuts an InFlight cap to floor(n × share), at least 1, for the
// local limiter (FailLocal); 0 stays 0.
func shareOfCap(n int, share float64) int {
	if n == 0 {
		return 0
	}
	return max(1, int(math.Floor(float64(n)*share+1e-9)))
}

// leased is the lease of one request while it is admitted: none, or held
// (from the store that granted it), then bound to the response.
type leased struct {
	held *Hold
}

// ask sets the in-flight fields of req under p, the lease held if any, and
// takes the time already spent in the queue off its MaxWait.
func (l *leased) ask(p *Plan, req *contract.Request, queued time.Duration) {
	if p.InFlight == 0 {
		return
	}
	req.InFlight, req.LeaseFor = p.InFlight, p.LeaseFor
	req.MaxWait = max(req.MaxWait-queued, 0)
	if l.held != nil {
		req.Held = l.held.l
	}
}

// take keeps the lease of an allowed reservation from from. A lease held
// from another store (the shared store failed meanwhile, FailLocal) is
// given back.
func (l *leased) take(c *Engine, p *Plan, from contract.Store, res contract.Reservation) {
	if !res.Lease.Held() {
		return
	}
	if l.held != nil && l.held.from == from {
		return // the same lease, renewed by the reservation
	}
	l.held.Release()
	l.held = c.hold(p, from, res.Lease)
}

// queue waits in the key's queue for a lease after a.g, a refusal for want
// of one, and then takes with the lease handed over (which takes no other);
// otherwise a is decided.
func (l *leased) queue(ctx context.Context, c *Engine, a *Admission) state {
	p, d, res, from := a.p, &a.Verdict, a.g.res, a.g.from
	a.g = grant{}
	ls, ok := contract.Leases(from), from.Caps().Leases
	if !res.Lease.Queued() || !ok {
		return l.refuse(a, res)
	}
	p.Leases.Queued.Add(1)
	start := c.Now()
	got, err := ls.Await(ctx, res.Lease)
	q := c.Now().Sub(start)
	d.Queued, d.Delay, d.InFlight = d.Queued+q, d.Delay+q, true
	switch {
	case ctx.Err() != nil:
		return a.end(Canceled, ctx.Err())
	case err != nil:
		return a.end(Failed, fmt.Errorf("throttle: rule %q: %w", p.Name, err))
	case !got.Held():
		return l.refuse(a, res)
	}
	l.held.Release()
	l.held = c.hold(p, from, got)
	return taking
}

// refuse decides a: refused for want of a lease, after res.
func (l *leased) refuse(a *Admission, res contract.Reservation) state {
	v := &a.Verdict
	v.RetryAfter, v.InFlight = res.RetryAfter, true
	if !v.Local {
		v.Cap = a.p.InFlight // the local limiter's is a share of it
	}
	return a.end(Limited, nil)
}

// drop gives the lease back unless v sends the request; a request sent
// carries it in v until its response.
func (l *leased) drop(v *Verdict) {
	if v.Outcome == Sent {
		v.Lease = l.held
		return
	}
	l.held.Release()
}

// Hold is a lease of a request in flight: renewed every half of its
// duration until released, and released once; reclaimed after longestHold.
type Hold struct {
	c       *Engine
	rule    string
	from    contract.Store
	l       contract.Lease
	every   time.Duration
	timeout time.Duration
	count   *LeaseCounters

	mu      sync.Mutex
	timer   *time.Timer
	renewed int  // the timer's firings since bound, every apart
	bound   bool // to a response (bind): its body holds the lease
	done    bool
}

// hold starts the renewal of l, a lease from from.
func (c *Engine) hold(p *Plan, from contract.Store, l contract.Lease) *Hold {
	h := &Hold{c: c, rule: p.Name, from: from, l: l, every: p.LeaseFor / 2, timeout: c.leaseTimeout(), count: p.Leases}
	h.count.Held.Add(1)
	h.mu.Lock()
	h.timer = c.After(h.every, h.renew)
	h.mu.Unlock()
	return h
}

// leaseTimeout bounds a renewal or a release, which run off the caller's
// context (a body's Close has none).
func (c *Engine) leaseTimeout() time.Duration {
	if c.policy.timeout > 0 {
		return c.policy.timeout
	}
	return DefaultStoreTimeout
}

// renew runs on the timer: it renews the lease and arms the next renewal,
// unless the lease was released meanwhile or had expired (then lost: the
// request stays in flight, uncapped; counted in Stats). At longestHold it
// reclaims the lease instead.
func (h *Hold) renew() {
	h.mu.Lock()
	if h.bound {
		h.renewed++
	}
	longest := h.renewed >= 2*longestHold
	h.mu.Unlock()
	if longest {
		h.reclaim()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	err := h.from.Renew(ctx, h.l)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.done:
	case errors.Is(err, contract.ErrLeaseExpired):
		h.count.Lost.Add(1)
	default:
		// A failed renewal is tried again: the lease lasts two periods.
		h.timer.Reset(h.every)
	}
}

// reclaim gives back the lease of a response whose body was not closed
// within longestHold, counts it and tells the engine's OnReclaim, unless it
// was released meanwhile.
func (h *Hold) reclaim() {
	if !h.giveBack() {
		return
	}
	h.count.Reclaimed.Add(1)
	if h.c.onReclaim != nil {
		h.c.onReclaim(h.rule, longestHold*2*h.every)
	}
}

// Release gives the lease back, once. It is safe on a nil h.
func (h *Hold) Release() {
	if h != nil {
		h.giveBack()
	}
}

// giveBack gives the lease back and reports whether it was still held.
func (h *Hold) giveBack() bool {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return false
	}
	h.done = true
	h.timer.Stop()
	h.mu.Unlock()
	h.count.Held.Add(-1)
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	// A failed release leaves the lease to expire.
	_ = h.from.Release(ctx, h.l)
	return true
}

// Bind says the lease is held by a response's body from now: the longest
// hold counts from here, not from the slot's wait.
func (h *Hold) Bind() {
	h.mu.Lock()
	h.bound = true
	h.mu.Unlock()
}
