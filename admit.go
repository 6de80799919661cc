package throttle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is admission: reserve a slot, wait for it, and retake it if the
// process woke too late: the Limiter's, and so every rule's of a Transport.
// It is also the only time seam: core.now and core.sleep (tests run under
// testing/synctest's fake clock, and replace sleep to make a process late).

// maxRetakes bounds how often one request retakes a slot it woke too late for.
const maxRetakes = 2

// cancelTimeout bounds every Cancel: the one sent after a waiter's context
// ended runs in the background on a context detached from the caller's,
// which is done.
const cancelTimeout = time.Second

// admission is one request's way through admission: the slot it holds and
// its decision so far. The Transport's attempts, and the Limiter's Wait,
// Allow and Reservation, each drive one.
type admission struct {
	r       *rule
	k       keyed
	maxWait time.Duration // the longest wait the caller accepts (0: a slot now)
	d       Decision
	g       grant     // the slot held, and the store that holds it
	asked   time.Time // before the store call that gave the slot
	// slot and latest are the earliest and the latest the slot may be on
	// this process's clock (clock.go); at is when to wake: latest, or zero
	// for at once.
	slot, latest, at time.Time
	// storeSlot is the slot on the shared store's clock (microseconds),
	// placed again at the wake-up and on the wire; 0 if not known.
	storeSlot int64
	// due is when the slot was due as the wire measures it (lateness.go):
	// an upper bound, from before the store call; zero when not measured.
	due   time.Time
	lease leased // under r.InFlight (lease.go)
	// epoch is the news epoch when the slot was asked for (news.go).
	epoch uint64
	// stale counts the slots given back because a pause or a move to a
	// stricter pace came after they were placed (news.go); they are in
	// d.Retaken too, but do not count against maxRetakes.
	stale int
}

func newAdmission(r *rule, k keyed, maxWait time.Duration) admission {
	return admission{r: r, k: k, maxWait: maxWait, d: Decision{Rule: r.Name, Key: k.key, Cost: k.cost}}
}

// own is the part of late, a's lateness at now, that is the process's own
// and that its allowance learns (clock.go): from the latest its slot may be,
// as the clocks' bounds stand now (a.latest, placed again at the wake-up and
// on the wire), to now: the wake-up and the wire. The bounds' width is not
// the process's: a reservation adds it as it will be (storeClock.spread),
// and a slow reply from the store, which left them wide, says nothing of
// how late the process sends. All of late when the slot was not placed on
// the store's clock.
func (a *admission) own(now time.Time, late time.Duration) time.Duration {
	if a.storeSlot == 0 {
		return late
	}
	return max(now.Sub(a.latest), 0)
}

// end decides a: it sets the outcome and the error of a.d. It returns false,
// so that take and await may return it.
func (a *admission) end(o Outcome, err error) bool {
	a.d.Outcome, a.d.Err = o, err
	return false
}

// admit reserves a slot for one send under r and waits for it, as the rule's
// Mode says. The decision, a.d, says what to do: send (Sent, or FailedOpen
// when the store failed), or refuse with a.d.Err. When the request is to be
// sent and its lateness is measured, a.due is the earliest its slot may have
// been on this process's clock (clock.go).
func (c *core) admit(ctx context.Context, r *rule, k keyed) admission {
	a := newAdmission(r, k, r.maxWait)
	c.run(ctx, &a)
	a.lease.drop(&a.d) // a request sent carries its lease to its response
	return a
}

// rewire gives a's slot back for a new one and waits for it, before the
// request is written: it got the connection to be written on later than its
// allowance plus r.retake after its slot (a dial, a TLS handshake, a full
// pool; lateness.go). The new slot is taken before the old one is given
// back, so that when none comes (refused, the store failed, the context
// ended) the request goes on the old one, late as it is, and never
// unrecorded. Its retakes count in Stats; the Decision was reported before.
func (c *core) rewire(ctx context.Context, a *admission) {
	prev := *a
	a.lease.held, a.d.lease = a.d.lease, nil // the retake renews the lease held
	a.d.Retaken++
	c.run(ctx, a)
	if a.d.Outcome != Sent {
		*a = prev
		return
	}
	a.lease.drop(&a.d)
	a.r.stats.retakes.Add(uint64(a.d.Retaken - prev.d.Retaken))
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	_ = prev.g.from.Cancel(cctx, prev.g.res)
	cancel()
}

// run takes a slot for a and waits for it, retaking it if the process woke
// too late, until a is decided.
func (c *core) run(ctx context.Context, a *admission) {
	for c.take(ctx, a) && c.await(ctx, a) {
	}
}

// take reserves a slot for a, in one call to the store through the failure
// policy, and reports whether it holds one. If not, a is decided: refused,
// failed, canceled, or to be sent uncounted (FailedOpen).
func (c *core) take(ctx context.Context, a *admission) bool {
	if err := ctx.Err(); err != nil {
		return a.end(Canceled, err)
	}
	r := a.r
	a.epoch = c.news.epoch.Load()
	a.asked = c.now()
	req := contract.Request{Limits: r.limitsFor(a.k.cost), Cost: a.k.cost, MaxServerWait: r.maxServerWait, Algorithm: r.Algorithm, Also: a.k.also}
	if a.maxWait > 0 {
		req.MaxWait = maxWait(ctx, a.asked, a.maxWait)
	}
	// The log records the request at its slot plus this process's
	// allowance (lateness.go); only the sliding log takes one.
	if r.Margin > 0 && r.Algorithm == contract.SlidingLog {
		req.Allowance = c.late.allowance(a.asked, r.Margin/2) + c.clock.spread(a.k.skey, a.asked) // clock.go
	}
	a.d.Allowance = req.Allowance
	a.lease.ask(r, &req, a.d.Queued)
	g := c.policy.reserve(ctx, r, a.k.skey, req) // policy.go
	a.d.Local, a.d.Err = g.local, g.down
	if g.local {
		// The in-process limiter answered at once, after the failed
		// call to the shared store: that call is no lateness.
		a.asked = c.now()
	}
	switch {
	case g.err == nil:
	case ctx.Err() != nil:
		return a.end(Canceled, ctx.Err())
	case g.open:
		return a.end(FailedOpen, g.err)
	case errors.Is(g.err, ErrStoreUnavailable):
		return a.end(Failed, g.err)
	default:
		return a.end(Failed, fmt.Errorf("throttle: rule %q: %w", r.Name, g.err))
	}
	res, lkey := g.res, a.k.key
	if res.Cause == contract.CauseLimit {
		lkey, a.d.Limit = r.limitOf(res, a.k) // multikey.go: the rule's key or one of Also
	}
	if !res.Allowed && res.Cause == contract.CauseInFlight {
		// No lease free: wait for one in the key's queue, then reserve
		// with it (which takes no other lease).
		if a.lease.await(ctx, c, r, a.k, g.from, res, &a.d) {
			return c.take(ctx, a)
		}
		return false
	}
	if !res.Allowed {
		up := res.Cause == contract.CauseUpstream
		a.d.RetryAfter, a.d.Upstream = res.RetryAfter, up
		return a.end(Limited, &LimitError{Rule: r.Name, Key: lkey, Limit: a.d.Limit, RetryAfter: res.RetryAfter, Upstream: up,
			BeyondDeadline: beyondDeadline(r, a.maxWait, req.MaxWait, res.RetryAfter, up),
			BeyondMaxWait:  beyondMaxWait(r, a.maxWait, res.RetryAfter, up)})
	}
	a.lease.take(c, r, g.from, res)
	a.g = g
	a.d.Delay += res.Delay
	replied := c.now()
	a.slot, a.latest, a.storeSlot = a.asked.Add(res.Delay), replied.Add(res.Delay), 0
	if !g.local { // the in-process limiter's clock is not the shared store's
		a.slot, a.latest = c.clock.place(a.k.skey, res, a.asked, replied) // clock.go
		if d := res.Decided(); d != 0 {
			a.storeSlot = d + res.Delay.Microseconds()
		}
		c.news.replied(a.k.skey, res, a.storeSlot) // news.go
	}
	a.at = time.Time{}
	if res.Delay > 0 {
		a.at = a.latest
	}
	return true
}

// await sleeps until a's slot and reports whether a must take another: it
// woke too late and gave this one back. If not, a is decided: Sent, or
// Canceled when ctx ended first (the slot given back).
func (c *core) await(ctx context.Context, a *admission) (retake bool) {
	r, res := a.r, a.g.res
	if err := c.sleepTo(ctx, a); err != nil {
		// The slot will not be used: give it back so that others may.
		// The caller must not wait for the store, so Cancel runs on
		// its own goroutine with a detached context; it is best effort
		// (a failed Cancel only leaves the slot unused).
		from := a.g.from // not a: a closure over it would move it to the heap
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
			defer cancel()
			_ = from.Cancel(cctx, res)
		}()
		return a.end(Canceled, err)
	}
	// A pause or a move to a stricter pace heard of since the slot was
	// placed: the slot would send into it, or on the shape the upstream
	// just refused. Take a new one (the store gives this one's time back
	// if none came after it).
	if a.stale < maxRetakes && c.news.stale(a) {
		c.giveBack(ctx, a)
		a.stale++
		a.d.Retaken++
		return true
	}
	if r.Margin == 0 {
		return c.sent(a)
	}
	woke := c.now()
	c.clock.replace(a, woke)
	if r.Algorithm == contract.SlidingLog {
		a.due = a.slot // only the log takes an allowance: measure on the wire
	}
	// A request that wakes later than its allowance plus r.retake
	// (half the margin; less for a paced limit) after its slot (a
	// stalled or starved process) would send into the headroom the
	// margin keeps for the upstream: it gives the slot back and takes
	// the next free one instead. Its lateness is an upper bound, from
	// the earliest its slot may be; its own part (from the latest,
	// clock.go) feeds the allowance of later reservations.
	late := woke.Sub(a.slot)
	c.late.observe(woke, a.own(woke, late), a.d.Allowance, false)
	if late <= a.d.Allowance+r.retake || a.d.Retaken-a.stale >= maxRetakes {
		return c.sent(a)
	}
	c.giveBack(ctx, a)
	a.d.Retaken++
	return true
}

// giveBack cancels a's slot before a retake. A failed Cancel leaves the old
// slot recorded, which only over-counts; the retake then meets the failure
// policy.
func (c *core) giveBack(ctx context.Context, a *admission) {
	cctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	_ = a.g.from.Cancel(cctx, a.g.res)
	cancel()
}

// sleepTo sleeps until a's slot: the latest it may be on this process's
// clock (zero: at once). A longer wait on a store in another process wakes
// first a little before, places the slot again by the clocks' bounds as
// they are then, narrowed by the replies that came meanwhile (clock.go),
// and sleeps the rest.
func (c *core) sleepTo(ctx context.Context, a *admission) error {
	if a.at.IsZero() {
		return c.sleep(ctx, 0)
	}
	wait := a.at.Sub(c.now())
	if a.storeSlot != 0 && c.clock.drift > 0 && wait > 2*wakeLead {
		if err := timerSleep(ctx, wait-wakeLead); err != nil {
			return err
		}
		c.clock.replace(a, c.now())
		a.at = a.latest
		wait = a.at.Sub(c.now())
	}
	return c.sleep(ctx, wait)
}

// sent decides a: Sent.
func (c *core) sent(a *admission) bool {
	if !a.d.Local {
		c.policy.mirror(a.r, a.k) // FailLocal's limiter sees shared sends too
	}
	return a.end(Sent, a.d.Err)
}

// beyondDeadline reports whether a refusal came from the context's deadline
// alone: the slot, retryAfter away, lay within limit, what the caller lets a
// request wait under r, but beyond the deadline that cut it to asked.
func beyondDeadline(r *rule, limit, asked, retryAfter time.Duration, upstream bool) bool {
	bound := limit
	if upstream {
		bound = min(bound, r.maxServerWait)
	}
	return limit > 0 && asked < limit && retryAfter <= bound
}

// beyondMaxWait reports whether a refusal came from limit, the rule's MaxWait
// in Wait mode: the slot, retryAfter away, lay beyond it, and for a wait the
// upstream imposed, MaxServerWait was not the nearer bound.
func beyondMaxWait(r *rule, limit, retryAfter time.Duration, upstream bool) bool {
	return limit > 0 && retryAfter > limit && (!upstream || limit <= r.maxServerWait)
}

// maxWait is the longest a request may wait for its slot: the rule's MaxWait,
// cut to the time left before the context's deadline, so that a request fails
// now rather than sleeping and then missing the deadline anyway.
func maxWait(ctx context.Context, now time.Time, limit time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, dl.Sub(now))
	}
	return max(limit, 0)
}
