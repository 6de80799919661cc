package engine

import (
	"context"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is what a sent request owes its units (contract.Part.Unit)
// until its response says what the upstream charged: its Bill, settled in
// one store call through the failure policy.

// settleTimeout bounds a settlement when the store sets no timeout of its
// own: it runs on a context detached from the request's, which may have
// ended with the response.
const settleTimeout = time.Second

// Bill is the estimate a sent admission recorded in its units, to settle
// once (Settle). It is not safe for concurrent use.
type Bill struct {
	p    *policy
	res  contract.Reservation
	from contract.Store
	done bool
}

// Bill returns what a sent admission owes its units, nil when it has none
// to settle: not sent, sent uncounted (FailedOpen), or without units.
func (e *Engine) Bill(a *Admission) *Bill {
	if a.next != decided || a.Verdict.Outcome != Sent || len(a.g.res.Units) == 0 || a.g.from == nil {
		return nil
	}
	return &Bill{p: e.policy, res: a.g.res, from: a.g.from}
}

// Units are the units billed, with the estimate each recorded.
func (b *Bill) Units() []contract.Unit { return b.res.Units }

// Settle records actual[i] instead of the estimate of Units()[i], in one
// store call, at most once: a second call does nothing. The shared store
// marked down is not tried (a *Down); a failure is returned, never retried:
// the estimate then stands.
func (b *Bill) Settle(ctx context.Context, actual []int64) error {
	if b == nil || b.done {
		return nil
	}
	b.done = true
	if b.from == b.p.shared && b.p.health.isDown.Load() {
		return &Down{Err: b.p.health.lastError(), NotTried: true}
	}
	timeout := b.p.timeout
	if timeout == 0 {
		timeout = settleTimeout
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := b.from.Settle(sctx, b.res, actual)
	if err != nil && b.from == b.p.shared {
		return &Down{Err: err}
	}
	return err
}
