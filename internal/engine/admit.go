package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is admission: reserve a slot, wait for it, and retake it if the
// process woke too late, as states that one driver moves through.

// MaxRetakes bounds how often one request retakes a slot it woke too late for.
const MaxRetakes = 2

// cancelTimeout bounds every Cancel: the one sent after a waiter's context
// ended runs in the background on a context detached from the caller's,
// which is done.
const cancelTimeout = time.Second

// state is where an admission stands: what its driver does next. Every
// caller (a Transport's attempt and its wire check, Limiter.Wait and Allow,
// Limiter.Reserve and its Reservation's Wait) moves an admission through
// the same states with drive.
type state uint8

const (
	// taking: reserve a slot, the first or the next after one was given
	// back, in one store call through the failure policy (take).
	taking state = iota
	// queuing: the in-flight cap is full: wait in the key's queue for a
	// lease, then take with it (queue, lease.go).
	queuing
	// waiting: a slot is held: sleep until it, then check that it is still
	// good, or give it back and take again (await).
	waiting
	// wired: the request got its connection: measure its lateness on the
	// wire, and if it is too late, take a new slot before it is written
	// (wired, lateness.go).
	wired
	// decided: a.Verdict says what to do.
	decided
)

// Admission is one request's way through admission: its state, the slot it
// holds and its verdict so far. Only the engine writes it.
type Admission struct {
	Verdict Verdict

	next    state
	p       *Plan
	k       Keys
	maxWait time.Duration // the longest wait the caller accepts (0: a slot now)
	g       grant         // the slot held and the store that holds it; queuing: the refusal
	asked   time.Time     // before the store call that gave the slot
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
	lease leased // under p.InFlight (lease.go)
	// epoch is the news epoch when the slot was asked for (news.go).
	epoch uint64
	// stale counts the slots given back because a pause or a move to a
	// stricter pace came after they were placed (news.go); they are in
	// Verdict.Retaken too, but do not count against MaxRetakes.
	stale int
	// onWire is the admission as it stood when the wire found it late: the
	// retake goes on the old slot if it finds no new one (settle).
	onWire *Admission
}

// Admit reserves a slot for one use of k under p and waits for it, at most
// maxWait (0: a slot now). The verdict says what to do: send (Sent, or
// FailedOpen when the store failed), or not.
func (e *Engine) Admit(ctx context.Context, p *Plan, k Keys, maxWait time.Duration) Admission {
	a := Admission{p: p, k: k, maxWait: maxWait}
	e.drive(ctx, &a, decided)
	return a
}

// Reserve reserves a slot as Admit does, without waiting for it: Held then
// reports whether a holds one, for Finish or Cancel.
func (e *Engine) Reserve(ctx context.Context, p *Plan, k Keys, maxWait time.Duration) Admission {
	a := Admission{p: p, k: k, maxWait: maxWait}
	e.drive(ctx, &a, waiting)
	return a
}

// Finish waits for the slot a holds (Reserve), retaking it when late, until
// a is decided.
func (e *Engine) Finish(ctx context.Context, a *Admission) { e.drive(ctx, a, decided) }

// Wired checks a sent admission when its request got its connection: the
// part of its lateness no wake-up sees (a dial, a TLS handshake, a full
// pool). Late past its allowance and its plan's Retake, and on a guarded
// engine, it takes a new slot before the request is written; it is sent on
// the old one if none comes (settle).
func (e *Engine) Wired(ctx context.Context, a *Admission) {
	a.next = wired
	e.drive(ctx, a, decided)
}

// Written records how late a's request was written, after the check on its
// connection (Wired): the write may wait for the process's scheduler, most
// in a burst, and what the upstream counts is the write. The sample only
// raises later allowances; a is not changed.
func (e *Engine) Written(a *Admission) {
	if !a.Measured() || !a.Sendable() || a.Verdict.Outcome != Sent {
		return
	}
	now := e.Now()
	e.late.observe(now, a.own(now, now.Sub(a.due)), a.Verdict.Allowance, true)
}

// Cancel gives back the slot a holds (Reserve) and decides a: Canceled,
// with err. It calls the store for at most cancelTimeout.
func (e *Engine) Cancel(a *Admission, err error) {
	if a.next != waiting {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	_ = a.g.from.Cancel(ctx, a.g.res)
	a.next = a.end(Canceled, err)
}

// Held reports whether a holds a slot it has not waited for (Reserve).
func (a *Admission) Held() bool { return a.next == waiting }

// Sendable reports whether a is decided to be sent.
func (a *Admission) Sendable() bool {
	return a.next == decided && (a.Verdict.Outcome == Sent || a.Verdict.Outcome == FailedOpen)
}

// Measured reports whether a's lateness is to be checked on the wire
// (Wired): a sliding log's slot, sent.
func (a *Admission) Measured() bool { return !a.due.IsZero() }

// Due is the earliest a's slot may have been on this process's clock, as
// the last check measured it; zero when not measured.
func (a *Admission) Due() time.Time { return a.due }

// retake is how much later than its allowance a may send on its slot: its
// plan's Retake, or PacedRetake for a slot placed under a learned pace.
func (a *Admission) retake() time.Duration {
	if a.Paced() > 0 {
		return min(a.p.Retake, a.p.PacedRetake)
	}
	return a.p.Retake
}

// Paced returns the spacing of the learned pace a's slot was reserved
// under; zero when none held.
func (a *Admission) Paced() time.Duration {
	if a.g.res.Reshaped() == 0 || a.g.res.Spacing <= 0 {
		return 0
	}
	return time.Duration(a.g.res.Spacing) * time.Microsecond
}

// Wait is how long from now until the slot a holds; zero when it is due.
func (a *Admission) Wait(now time.Time) time.Duration {
	if a.next != waiting || a.at.IsZero() {
		return 0
	}
	return max(a.at.Sub(now), 0)
}

// own is the part of late, a's lateness at now, that is the process's own
// and that its allowance learns (clock.go): from the latest its slot may be,
// as the clocks' bounds stand now (a.latest, placed again at the wake-up and
// on the wire), to now: the wake-up and the wire. The bounds' width is not
// the process's: a reservation adds it as it will be (storeClock.spread),
// and a slow reply from the store, which left them wide, says nothing of
// how late the process sends. All of late when the slot was not placed on
// the store's clock.
func (a *Admission) own(now time.Time, late time.Duration) time.Duration {
	if a.storeSlot == 0 {
		return late
	}
	return max(now.Sub(a.latest), 0)
}

// end decides a: it sets the outcome and the error of its verdict.
func (a *Admission) end(o Outcome, err error) state {
	a.Verdict.Outcome, a.Verdict.Err = o, err
	return decided
}

// drive moves a from state to state until it is decided, or until it would
// enter stop (Limiter.Reserve stops before waiting). Each step is one
// function that returns the next state; none calls another step.
func (c *Engine) drive(ctx context.Context, a *Admission, stop state) {
	for a.next != stop && a.next != decided {
		switch a.next {
		case taking:
			a.next = c.take(ctx, a)
		case queuing:
			a.next = a.lease.queue(ctx, c, a) // lease.go
		case waiting:
			a.next = c.await(ctx, a)
		case wired:
			a.next = c.wired(ctx, a) // lateness.go
		}
	}
	if a.next == decided {
		c.settle(ctx, a)
	}
}

// settle ends a decided admission: a request late on the wire that found
// no new slot goes on its old one, late as it is, and never unrecorded; one
// that found it gives the old one back. A request sent carries its lease to
// its response; any other gives it back.
func (c *Engine) settle(ctx context.Context, a *Admission) {
	if prev := a.onWire; prev != nil {
		a.onWire = nil
		if a.Verdict.Outcome != Sent {
			// The retake may have replaced the lease (another store's
			// under FailLocal, or one the queue handed over), giving
			// the old one back: the request goes on with the one held.
			held := a.lease.held
			*a = *prev
			a.lease.held, a.Verdict.Lease = held, held
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		_ = prev.g.from.Cancel(cctx, prev.g.res)
		cancel()
	}
	a.lease.drop(&a.Verdict)
}

// take reserves a slot for a, in one call to the store through the failure
// policy: then a waits for it, or for a lease in the queue when the key's
// in-flight cap is full; otherwise a is decided: refused, failed, canceled,
// or to be sent uncounted (FailedOpen).
func (c *Engine) take(ctx context.Context, a *Admission) state {
	if err := ctx.Err(); err != nil {
		return a.end(Canceled, err)
	}
	p := a.p
	req := c.request(ctx, a)
	if p.Tenants && a.g.res.Allowed && a.g.from == c.policy.shared {
		// A retake (a holds the slot it gave back) keeps its start tag:
		// its place among the waiters, charged once. Only the shared
		// store's tags mean anything there (policy.reserve drops it for
		// the local limiter).
		req.Again, req.Tag = true, a.g.res.Tag
	}
	a.Verdict.Allowance = req.Allowance
	a.lease.ask(p, &req, a.Verdict.Queued)
	g := c.policy.reserve(ctx, p, a.k.Key, req) // policy.go
	return c.granted(ctx, a, g, req)
}

// request is the reservation a asks for now: its limits, cost, waits and
// keys, the allowance of a sliding log, and its lane or tenant.
func (c *Engine) request(ctx context.Context, a *Admission) contract.Request {
	p := a.p
	a.epoch = c.news.epoch.Load()
	a.asked = c.Now()
	req := contract.Request{Limits: p.LimitsFor(a.k.Cost), Cost: a.k.Cost, MaxServerWait: p.MaxServerWait, Algorithm: p.Algorithm, Also: a.k.Also}
	if a.maxWait > 0 {
		req.MaxWait = maxWait(ctx, a.asked, a.maxWait)
	}
	// The log records the request at its slot plus this process's
	// allowance (lateness.go); only the sliding log takes one.
	if p.Margin > 0 && p.Algorithm == contract.SlidingLog {
		req.Allowance = c.late.allowance(a.asked, p.Margin/2) + c.clock.spread(a.k.Key, a.asked) // clock.go
	}
	if p.Lanes > 1 {
		req.Lane, req.Yield = a.k.Lane, a.k.Lane < p.Lanes-1
	}
	if p.Tenants {
		req.Tenant, req.Step, req.Yield = a.k.Tenant, a.k.Step, true
	}
	return req
}

// granted moves a on by g, the store's answer to req (take, confirm):
// waiting for a slot, queuing for a lease, or decided.
func (c *Engine) granted(ctx context.Context, a *Admission, g grant, req contract.Request) state {
	p := a.p
	a.Verdict.Local, a.Verdict.Err = g.local, nil
	if g.down != nil {
		a.Verdict.Err = g.down
	}
	if g.local {
		// The in-process limiter answered at once, after the failed
		// call to the shared store: that call is no lateness.
		a.asked = c.Now()
	}
	switch {
	case g.err == nil:
	case ctx.Err() != nil:
		return a.end(Canceled, ctx.Err())
	case g.open:
		return a.end(FailedOpen, g.err)
	case g.down != nil && g.err == error(g.down):
		return a.end(Failed, g.err)
	default:
		return a.end(Failed, fmt.Errorf("throttle: rule %q: %w", p.Name, g.err))
	}
	res := g.res
	if res.Cause == contract.CauseLimit {
		v := &a.Verdict
		v.HasLimit, v.LimitPart, v.LimitIdx = true, res.Part, res.Limit
	}
	if !res.Allowed && res.Cause == contract.CauseInFlight {
		a.g = g // no slot: the refusal, for the queue
		return queuing
	}
	if !res.Allowed {
		up := res.Cause == contract.CauseUpstream
		v := &a.Verdict
		v.RetryAfter, v.Upstream = res.RetryAfter, up
		v.BeyondDeadline = beyondDeadline(p, a.maxWait, req.MaxWait, res.RetryAfter, up)
		v.BeyondMaxWait = beyondMaxWait(p, a.maxWait, res.RetryAfter, up)
		return a.end(Limited, nil)
	}
	a.lease.take(c, p, g.from, res)
	a.g = g
	a.Verdict.Took = res.Took
	// The slot stands in the log at its entry, recorded with an allowance:
	// the one asked for, raised to contract.LaneAllowance for a slot that
	// yields or was taken from a waiter who yielded (a lower lane's, a
	// later turn's), whose allowance it then is. The request sends within
	// it, however late it asked to be, and need not send sooner. (An
	// entry may lie further out, after another process's: that is no
	// allowance.)
	if req.Allowance > 0 && res.Slot != 0 && res.Entry >= res.Slot {
		recorded := req.Allowance
		if res.Yielded != "" || res.Took {
			recorded = max(recorded, contract.LaneAllowance)
		}
		a.Verdict.Allowance = min(time.Duration(res.Entry-res.Slot)*time.Microsecond, recorded)
	}
	a.Verdict.Delay += res.Delay
	replied := c.Now()
	a.slot, a.latest, a.storeSlot = a.asked.Add(res.Delay), replied.Add(res.Delay), 0
	if !g.local { // the in-process limiter's clock is not the shared store's
		a.slot, a.latest = c.clock.place(a.k.Key, res, a.asked, replied) // clock.go
		if d := res.Decided(); d != 0 {
			a.storeSlot = d + res.Delay.Microseconds()
		}
		c.news.replied(a.k.Key, res, a.storeSlot) // news.go
	}
	a.at = time.Time{}
	if res.Delay > 0 {
		a.at = a.latest
	}
	return waiting
}

// await sleeps until a's slot. Then a is decided (Sent; Canceled when ctx
// ended first, the slot given back), or takes another slot: it woke too
// late, or its key was paused or moved to a stricter pace since, and gave
// this one back.
func (c *Engine) await(ctx context.Context, a *Admission) state {
	p := a.p
	if err := c.sleepTo(ctx, a); err != nil {
		// The slot will not be used: give it back so that others may.
		// The caller must not wait for the store, so Cancel runs on
		// its own goroutine with a detached context; it is best effort
		// (a failed Cancel only leaves the slot unused).
		go cancelDetached(ctx, a.g.from, a.g.res)
		return a.end(Canceled, err)
	}
	// A slot that yields to higher lanes: confirmed, or taken by one and
	// the next of its lane held instead (wait for it).
	if a.g.res.Yielded != "" {
		if next, held := c.confirm(ctx, a); !held {
			return next
		}
	}
	// A pause or a move to a stricter pace heard of since the slot was
	// placed: the slot would send into it, or on the shape the upstream
	// just refused. Take a new one (the store gives this one's time back
	// if none came after it).
	if a.stale < MaxRetakes && c.news.stale(a) {
		c.giveBack(ctx, a)
		a.stale++
		a.Verdict.Retaken++
		return taking
	}
	if p.Margin == 0 {
		return c.sent(a)
	}
	woke := c.Now()
	c.clock.replace(a, woke)
	if p.Algorithm == contract.SlidingLog {
		a.due = a.slot // only the log takes an allowance: measure on the wire
	}
	// A request that wakes later than its allowance plus p.Retake
	// (half the margin; less for a paced limit) after its slot (a
	// stalled or starved process) would send into the headroom the
	// margin keeps for the upstream: it gives the slot back and takes
	// the next free one instead. Its lateness is an upper bound, from
	// the earliest its slot may be; its own part (from the latest,
	// clock.go) feeds the allowance of later reservations.
	late := woke.Sub(a.slot)
	c.late.observe(woke, a.own(woke, late), a.Verdict.Allowance, false)
	if late <= a.Verdict.Allowance+a.retake() || a.Verdict.Retaken-a.stale >= MaxRetakes {
		return c.sent(a)
	}
	c.giveBack(ctx, a)
	a.Verdict.Retaken++
	return taking
}

// cancelDetached gives res back to from, on a context detached from ctx's
// end. Its arguments are copied when the go statement runs: a closure over
// them would move the reservation to the heap on every wait.
func cancelDetached(ctx context.Context, from contract.Store, res contract.Reservation) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	_ = from.Cancel(cctx, res)
}

// confirm confirms at its wake-up the slot a holds that yields to higher
// lanes, or to other tenants' earlier turns, in one store call
// (docs/lanes.md, docs/tenants.md). It reports held when the slot
// stands; otherwise a higher lane took it and the call reserved the next
// slot of a's lane, or refused: the next state. A call that fails leaves
// it unknown whether the slot stands: a gives it back (the store removes
// nothing of a slot a higher lane took) and takes another.
func (c *Engine) confirm(ctx context.Context, a *Admission) (next state, held bool) {
	epoch, asked := a.epoch, a.asked // the slot's, kept if it stands
	req := c.request(ctx, a)
	req.Allowance, req.Confirm = a.Verdict.Allowance, a.g.res.Yielded
	var res contract.Reservation
	var err error
	if a.g.from == c.policy.shared {
		res, err = c.policy.call(ctx, a.k.Key, req) // policy.go: bounded by the store timeout
	} else {
		res, err = a.g.from.Reserve(ctx, a.k.Key, req)
	}
	switch {
	case err != nil:
		c.giveBack(context.WithoutCancel(ctx), a)
		a.Verdict.Retaken++
		return taking, false
	case res.Confirmed:
		a.g.res.Yielded, a.epoch, a.asked = "", epoch, asked
		return waiting, true
	}
	a.Verdict.Bumped++
	return c.granted(ctx, a, grant{res: res, from: a.g.from}, req), false
}

// giveBack cancels a's slot before a retake. A failed Cancel leaves the old
// slot recorded, which only over-counts; the retake then meets the failure
// policy.
func (c *Engine) giveBack(ctx context.Context, a *Admission) {
	cctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	_ = a.g.from.Cancel(cctx, a.g.res)
	cancel()
}

// sleepTo sleeps until a's slot: the latest it may be on this process's
// clock (zero: at once). A longer wait on a store in another process wakes
// first a little before, places the slot again by the clocks' bounds as
// they are then, narrowed by the replies that came meanwhile (clock.go),
// and sleeps the rest.
func (c *Engine) sleepTo(ctx context.Context, a *Admission) error {
	if a.at.IsZero() {
		return c.Sleep(ctx, 0)
	}
	wait := a.at.Sub(c.Now())
	if a.storeSlot != 0 && c.clock.drift > 0 && wait > 2*wakeLead {
		if err := c.Nap(ctx, wait-wakeLead); err != nil {
			return err
		}
		c.clock.replace(a, c.Now())
		a.at = a.latest
		wait = a.at.Sub(c.Now())
	}
	return c.Sleep(ctx, wait)
}

// sent decides a: Sent.
func (c *Engine) sent(a *Admission) state {
	if !a.Verdict.Local {
		c.policy.mirror(a.p, a.k) // FailLocal's limiter sees shared sends too
	}
	return a.end(Sent, a.Verdict.Err)
}

// beyondDeadline reports whether a refusal came from the context's deadline
// alone: the slot, retryAfter away, lay within limit, what the caller lets a
// request wait under p, but beyond the deadline that cut it to asked.
func beyondDeadline(p *Plan, limit, asked, retryAfter time.Duration, upstream bool) bool {
	bound := limit
	if upstream {
		bound = min(bound, p.MaxServerWait)
	}
	return limit > 0 && asked < limit && retryAfter <= bound
}

// beyondMaxWait reports whether a refusal came from limit, the rule's MaxWait
// in Wait mode: the slot, retryAfter away, lay beyond it, and for a wait the
// upstream imposed, MaxServerWait was not the nearer bound.
func beyondMaxWait(p *Plan, limit, retryAfter time.Duration, upstream bool) bool {
	return limit > 0 && retryAfter > limit && (!upstream || limit <= p.MaxServerWait)
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
