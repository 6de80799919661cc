package throttle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// This file is the cap on requests in flight (Rule.InFlight): the lease a
// request takes with its slot, waits for in the key's queue when none is
// free, renews while it is in flight, and gives back when its response body
// is closed. docs/concurrency.md has the design and its costs.

// defaultLeaseFor is Rule.LeaseFor when zero.
const defaultLeaseFor = 30 * time.Second

// minLeaseFor bounds Rule.LeaseFor from below: a lease is renewed every half
// of it, one store call each time.
const minLeaseFor = 100 * time.Millisecond

// longestHold bounds how long a response body holds its request's lease, in
// LeaseFor: one never closed gives the lease back after it (renewed every
// half LeaseFor, so twice as many renewals).
const longestHold = 10

// compileInFlight checks and completes the in-flight fields of c.
func (c *rule) compileInFlight() error {
	switch {
	case c.InFlight == 0 && c.LeaseFor == 0:
		return nil
	case c.InFlight < 0:
		return c.fail("negative InFlight %d", c.InFlight)
	case c.InFlight == 0:
		return c.fail("LeaseFor %s without InFlight", c.LeaseFor)
	case c.LeaseFor == 0:
		c.LeaseFor = defaultLeaseFor
	case c.LeaseFor < minLeaseFor || c.LeaseFor > contract.MaxLease:
		return c.fail("LeaseFor %s must be from %s to %s", c.LeaseFor, minLeaseFor, contract.MaxLease)
	}
	return nil
}

// checkLeases fails when a rule caps requests in flight and st cannot.
func checkLeases(st store.Store, rules []*rule) error {
	if st.Caps().Leases {
		return nil
	}
	for _, r := range rules {
		if r != nil && r.InFlight > 0 {
			return &ConfigError{Rule: r.Name, Reason: fmt.Sprintf("InFlight needs a store that keeps leases; %T does not", st)}
		}
	}
	return nil
}

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
	held *leaseHold
}

// ask sets the in-flight fields of req under r, the lease held if any, and
// takes the time already spent in the queue off its MaxWait.
func (l *leased) ask(r *rule, req *contract.Request, queued time.Duration) {
	if r.InFlight == 0 {
		return
	}
	req.InFlight, req.LeaseFor = r.InFlight, r.LeaseFor
	req.MaxWait = max(req.MaxWait-queued, 0)
	if l.held != nil {
		req.Held = l.held.l
	}
}

// take keeps the lease of an allowed reservation from from. A lease held
// from another store (the shared store failed meanwhile, FailLocal) is
// given back.
func (l *leased) take(c *core, r *rule, from store.Store, res contract.Reservation) {
	if !res.Lease.Held() {
		return
	}
	if l.held != nil && l.held.from == from {
		return // the same lease, renewed by the reservation
	}
	l.held.release()
	l.held = c.hold(r, from, res.Lease)
}

// queue waits in the key's queue for a lease after a.full, a refusal for
// want of one, and then takes with the lease handed over (which takes no
// other); otherwise a is decided.
func (l *leased) queue(ctx context.Context, c *core, a *admission) state {
	r, d, res, from := a.r, &a.d, a.full.res, a.full.from
	a.full = grant{}
	ls, ok := contract.Leases(from), from.Caps().Leases
	if !res.Lease.Queued() || !ok {
		return l.refuse(a, res)
	}
	r.stats.leasesQueued.Add(1)
	start := c.now()
	got, err := ls.Await(ctx, res.Lease)
	q := c.now().Sub(start)
	d.Queued, d.Delay, d.InFlight = d.Queued+q, d.Delay+q, true
	switch {
	case ctx.Err() != nil:
		return a.end(Canceled, ctx.Err())
	case err != nil:
		return a.end(Failed, fmt.Errorf("throttle: rule %q: %w", r.Name, err))
	case !got.Held():
		return l.refuse(a, res)
	}
	l.held.release()
	l.held = c.hold(r, from, got)
	return taking
}

// refuse decides a: refused for want of a lease, after res.
func (l *leased) refuse(a *admission, res contract.Reservation) state {
	a.d.RetryAfter, a.d.InFlight = res.RetryAfter, true
	e := &LimitError{Rule: a.r.Name, Key: a.k.key, RetryAfter: res.RetryAfter, InFlight: true}
	if !a.d.Local {
		e.inFlightCap = a.r.InFlight // the local limiter's is a share of it
	}
	return a.end(Limited, e)
}

// drop gives the lease back unless d sends the request; a request sent
// carries it in d until its response.
func (l *leased) drop(d *Decision) {
	if d.Outcome == Sent {
		d.lease = l.held
		return
	}
	l.held.release()
}

// leaseHold is a lease of a request in flight: renewed every half of its
// duration until released, and released once; reclaimed after longestHold.
type leaseHold struct {
	c       *core
	rule    string
	from    store.Store
	ls      contract.Leases
	l       contract.Lease
	every   time.Duration
	timeout time.Duration
	stats   *ruleStats

	mu      sync.Mutex
	timer   *time.Timer
	renewed int  // the timer's firings since bound, every apart
	bound   bool // to a response (bind): its body holds the lease
	done    bool
}

// hold starts the renewal of l, a lease from from.
func (c *core) hold(r *rule, from store.Store, l contract.Lease) *leaseHold {
	h := &leaseHold{c: c, rule: r.Name, from: from, ls: from, l: l, every: r.LeaseFor / 2, timeout: c.leaseTimeout(), stats: r.stats}
	h.stats.leases.Add(1)
	h.mu.Lock()
	h.timer = c.after(h.every, h.renew)
	h.mu.Unlock()
	return h
}

// leaseTimeout bounds a renewal or a release, which run off the caller's
// context (a body's Close has none).
func (c *core) leaseTimeout() time.Duration {
	if c.policy.timeout > 0 {
		return c.policy.timeout
	}
	return defaultStoreTimeout
}

// renew runs on the timer: it renews the lease and arms the next renewal,
// unless the lease was released meanwhile or had expired (then lost: the
// request stays in flight, uncapped; counted in Stats). At longestHold it
// reclaims the lease instead.
func (h *leaseHold) renew() {
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
	err := h.ls.Renew(ctx, h.l)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.done:
	case errors.Is(err, contract.ErrLeaseExpired):
		h.stats.leasesLost.Add(1)
	default:
		// A failed renewal is tried again: the lease lasts two periods.
		h.timer.Reset(h.every)
	}
}

// reclaim gives back the lease of a response whose body was not closed
// within longestHold, counts it and warns, unless it was released meanwhile.
func (h *leaseHold) reclaim() {
	if !h.giveBack() {
		return
	}
	h.stats.leasesReclaimed.Add(1)
	c := h.c
	ctx := context.Background()
	if c.logger == nil || !c.logger.Enabled(ctx, slog.LevelWarn) ||
		!c.logFull(ctx, slog.LevelWarn, logKind{rule: h.rule, feedback: bodyNotClosed}) {
		return
	}
	most := longestHold * 2 * h.every
	c.logger.LogAttrs(ctx, slog.LevelWarn,
		fmt.Sprintf("throttle: rule %q: a response body was not closed within %s: its lease under InFlight is given back; close every response body", h.rule, most),
		slog.String("rule", h.rule), slog.Duration("held", most))
}

// release gives the lease back, once. It is safe on a nil h.
func (h *leaseHold) release() {
	if h != nil {
		h.giveBack()
	}
}

// giveBack gives the lease back and reports whether it was still held.
func (h *leaseHold) giveBack() bool {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return false
	}
	h.done = true
	h.timer.Stop()
	h.mu.Unlock()
	h.stats.leases.Add(-1)
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	// A failed release leaves the lease to expire.
	_ = h.ls.Release(ctx, h.l)
	return true
}

// bind gives the lease back when resp's body is read to its end or closed,
// at once when it has none. It is safe on a nil h.
func (h *leaseHold) bind(resp *http.Response) {
	if h == nil {
		return
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		h.release()
		return
	}
	h.mu.Lock()
	h.bound = true // the longest hold counts from here, not from the slot's wait
	h.mu.Unlock()
	resp.Body = &leasedBody{resp.Body, h}
}

// leasedBody is a response body that releases its request's lease.
type leasedBody struct {
	io.ReadCloser
	h *leaseHold
}

func (b *leasedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.h.release()
	}
	return n, err
}

func (b *leasedBody) Close() error {
	err := b.ReadCloser.Close()
	b.h.release()
	return err
}
