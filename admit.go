package throttle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttle-go/throttle/store"
)

// This file is admission: reserve a slot, wait for it, and retake it if the
// process woke too late. It is also the transport's only time seam: t.now and
// t.sleep (tests run under testing/synctest's fake clock, and replace sleep to
// make a process late).

// maxRetakes bounds how often one request retakes a slot it woke too late for.
const maxRetakes = 2

// cancelTimeout bounds the Cancel sent after a waiter's context ended: it runs
// in the background on a context detached from the caller's, which is done.
const cancelTimeout = time.Second

// admit reserves a slot for one send under r and waits for it. The decision
// says what to do: send (Sent, or FailedOpen when the store failed), or
// refuse with d.Err. When the request is to be sent and its lateness is
// measured, due is when its slot was due on this process's clock (an upper
// bound: the time before the Reserve call plus the delay).
func (t *Transport) admit(ctx context.Context, r *rule, k keyed) (d Decision, due time.Time) {
	d = Decision{Rule: r.Name, Key: k.key, Cost: k.cost}
	if err := ctx.Err(); err != nil {
		return d.end(Canceled, err), due
	}
	var lease leased // under r.InFlight (lease.go)
	defer lease.drop(&d)
	for {
		asked := t.now()
		req := store.Request{Limits: r.eff, Cost: k.cost, MaxServerWait: r.maxServerWait, Algorithm: r.Algorithm}
		if r.Mode == Wait {
			req.MaxWait = maxWait(ctx, asked, r.maxWait)
		}
		// The log records the request at its slot plus this process's
		// allowance (lateness.go); only the sliding log takes one.
		if r.Margin > 0 && r.Algorithm == store.SlidingLog {
			req.Allowance = t.late.allowance(asked)
		}
		d.Allowance = req.Allowance
		lease.ask(r, &req, d.Queued)
		g := t.policy.reserve(ctx, r, k.skey, req) // policy.go
		d.Local, d.Err = g.local, g.down
		if g.local {
			// The in-process limiter answered at once, after the failed
			// call to the shared store: that call is no lateness.
			asked = t.now()
		}
		switch {
		case g.err == nil:
		case ctx.Err() != nil:
			return d.end(Canceled, ctx.Err()), due
		case g.open:
			return d.end(FailedOpen, g.err), due
		case errors.Is(g.err, ErrStoreUnavailable):
			return d.end(Failed, g.err), due
		default:
			return d.end(Failed, fmt.Errorf("throttle: rule %q: %w", r.Name, g.err)), due
		}
		res := g.res
		if res.Cause == store.CauseLimit && res.Limit < len(r.Limits) {
			d.Limit = r.Limits[res.Limit]
		}
		if !res.Allowed && res.Cause == store.CauseInFlight {
			if lease.await(ctx, t, r, k, g.from, res, &d) {
				continue
			}
			return d, due
		}
		if !res.Allowed {
			up := res.Cause == store.CauseUpstream
			d.RetryAfter, d.Upstream = res.RetryAfter, up
			return d.end(Limited, &LimitError{Rule: r.Name, Key: k.key, Limit: d.Limit, RetryAfter: res.RetryAfter, Upstream: up,
				BeyondDeadline: beyondDeadline(r, req.MaxWait, res.RetryAfter, up)}), due
		}
		lease.take(t, r, g.from, res)
		d.Delay += res.Delay
		if err := t.sleep(ctx, res.Delay); err != nil {
			// The slot will not be used: give it back so that others may.
			// The caller must not wait for the store, so Cancel runs on
			// its own goroutine with a detached context; it is best effort
			// (a failed Cancel only leaves the slot unused).
			from := g.from // not g: a closure over it would move every grant to the heap
			go func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
				defer cancel()
				_ = from.Cancel(cctx, res)
			}()
			return d.end(Canceled, err), due
		}
		if r.Margin == 0 {
			break
		}
		if r.Algorithm == store.SlidingLog {
			due = asked.Add(res.Delay) // only the log takes an allowance: measure on the wire
		}
		// A request that wakes later than its allowance plus r.retake
		// (half the margin; less for a paced limit) after its slot (a
		// stalled or starved process) would send into the headroom the
		// margin keeps for the upstream: it gives the slot back and takes
		// the next free one instead. Its lateness (an upper bound: from
		// before the Reserve call, so it includes the store's round trip)
		// feeds the allowance of later reservations.
		woke := t.now()
		late := woke.Sub(asked) - res.Delay
		t.late.observe(woke, late, d.Allowance, false)
		if late <= d.Allowance+r.retake || d.Retaken == maxRetakes {
			break
		}
		// A failed Cancel leaves the old slot recorded, which only
		// over-counts; the retake then meets the failure policy.
		cctx, cancel := context.WithTimeout(ctx, cancelTimeout)
		_ = g.from.Cancel(cctx, res)
		cancel()
		d.Retaken++
	}
	if !d.Local {
		t.policy.mirror(r, k) // FailLocal's limiter sees shared sends too
	}
	return d.end(Sent, d.Err), due
}

// end sets the outcome and the error of d and returns it.
func (d Decision) end(o Outcome, err error) Decision {
	d.Outcome, d.Err = o, err
	return d
}

// sleep blocks for d, or until ctx ends, whichever is first, and returns
// ctx.Err() in the second case. (x/time/rate's wait takes a timer factory for
// its tests; testing/synctest's fake clock makes one unnecessary here.)
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beyondDeadline reports whether a refusal came from the context's deadline
// alone: the slot, retryAfter away, lay within what the rule lets a request
// wait, but beyond the deadline that cut its MaxWait to asked.
func beyondDeadline(r *rule, asked, retryAfter time.Duration, upstream bool) bool {
	bound := r.maxWait
	if upstream {
		bound = min(bound, r.maxServerWait)
	}
	return r.Mode == Wait && asked < r.maxWait && retryAfter <= bound
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
