// Package engine is throttle's admission: it takes a rule's plan and one
// request's keys, reserves a slot in the store through the failure policy,
// waits for it, and returns a verdict. The public package maps the verdict
// to its Decision and errors, in one place; nothing outside this package
// writes an admission's state.
//
// An admission moves through states (admit.go): taking, queuing, waiting,
// wired, decided. One driver, drive, runs them for every caller: the
// Transport, the Limiter and its Reservation. docs/architecture.md draws
// them.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// Plan is what the engine needs of one rule: its limits, as reserved, and
// how long a request may wait. It is built once, when the rule is, and is
// read-only after.
type Plan struct {
	Name  string // the rule's name, for errors and logs
	Scope string // the prefix of the rule's store keys
	// Limits are the rule's limits with its Margin added; Auto is the index
	// of the default pace among them, -1 if none.
	Limits    []contract.Limit
	Auto      int
	Algorithm contract.Algorithm
	Margin    time.Duration
	// Retake is how much later than its allowance a request may wake and
	// still send on its slot; PacedRetake, on a slot placed under a learned
	// pace.
	Retake, PacedRetake time.Duration
	// MaxWait is the longest a request waits for its slot (0: FailFast);
	// MaxServerWait the longest for a wait the upstream imposed.
	MaxWait, MaxServerWait time.Duration
	// InFlight caps the requests in flight (0: no cap), each holding a
	// lease for LeaseFor, renewed.
	InFlight int
	LeaseFor time.Duration
	// Leases counts the leases of the rule's name (shared by the rules of
	// that name).
	Leases *LeaseCounters
	// Lanes is the number of priority lanes (0 or 1: none): a request of
	// lane Keys.Lane below Lanes-1 yields its slot to higher lanes and
	// confirms it at its wake-up (admit.go's confirm).
	Lanes int
	// Tenants orders the waiters of a key by tenant (Keys.Tenant): every
	// request yields its slot to one of a smaller start tag and confirms it
	// at its wake-up, as a lower lane does.
	Tenants bool
}

// LimitsFor returns the limits a request of cost reserves: the plan's, with
// the default pace's burst raised to cost-1 for a request that costs more
// than the burst + 1 (it goes as one send, as under a learned pace).
func (p *Plan) LimitsFor(cost int) []contract.Limit {
	if p.Auto < 0 || cost <= p.Limits[p.Auto].Burst+1 {
		return p.Limits
	}
	l := make([]contract.Limit, len(p.Limits))
	copy(l, p.Limits)
	l[p.Auto].Burst = cost - 1
	return l
}

// Keys are one request's keys: its rate key as stored (scoped by the rule),
// its cost and the keys of Also.
type Keys struct {
	Key  string
	Cost int
	Also []contract.Part
	Lane int // 0 to Plan.Lanes-1
	// Tenant is the request's tenant as stored (hashed) and Step its
	// finish tag's step (contract.TenantStep), under Plan.Tenants.
	Tenant string
	Step   int64
}

// Outcome is what an admission decided; the public Outcome has the same
// values.
type Outcome uint8

const (
	Sent Outcome = iota
	Limited
	Canceled
	Failed
	FailedOpen
)

// Verdict is what an admission decided and how: everything the public
// Decision and its errors say that the engine knows.
type Verdict struct {
	Outcome Outcome
	// Err is why the request is not sent (Limited: nil, the caller builds
	// its refusal from the fields below), or the store's failure when it
	// is sent uncounted (FailedOpen) or counted locally (Local). A failure
	// of the shared store is a *Down.
	Err                 error
	Delay, Allowance    time.Duration
	RetryAfter, Queued  time.Duration
	Retaken             int
	Bumped              int  // times a higher lane (or an earlier tenant's turn) took the slot held (each a slot later)
	Took                bool // the slot was a lower lane's, taken from its waiter
	Upstream, Local     bool
	InFlight            bool // the in-flight cap held the request back
	Cap                 int  // the cap that refused it, 0 when the local limiter's share did
	BeyondDeadline      bool // refused by the context's deadline alone
	BeyondMaxWait       bool // refused by MaxWait
	HasLimit            bool // a limit set the delay or the refusal:
	LimitPart, LimitIdx int  // Part (0: the rule's key, i: Also[i-1]) and its index
	Lease               *Hold
}

// Down is a failure of the shared store, or its being marked down: the
// public StoreError.
type Down struct {
	Err      error
	NotTried bool // not called: marked down, another request probes it
	// Detail says why the local limiter could not count the request
	// either (FailLocal), "" if it was not asked.
	Detail string
}

func (d *Down) Error() string {
	s := "store unavailable"
	if d.NotTried {
		s += " (not tried: marked down until a probe succeeds)"
	}
	if d.Err != nil {
		s += ": " + d.Err.Error()
	}
	return s + d.Detail
}

func (d *Down) Unwrap() error { return d.Err }

// ErrTimeout is matched by a store call that got no answer within the
// store timeout.
var ErrTimeout = errors.New("throttle: store timeout")

// timeoutError is a store call that got no answer within d.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string {
	return fmt.Sprintf("no answer within %s (WithStoreTimeout)", e.d)
}

func (e *timeoutError) Is(target error) bool { return target == ErrTimeout }

// Failure is what a request does when the shared store fails: FailClosed by
// default, WithFailOpen's or WithFailLocal's in the public package.
type Failure uint8

const (
	FailClosed Failure = iota
	FailOpen
	FailLocal
)

// Config configures an Engine.
type Config struct {
	Failure Failure
	Timeout time.Duration // 0: DefaultStoreTimeout
	// Share is FailLocal's share of every limit; Plans, every rule's plan,
	// each cut to it.
	Share float64
	Plans []*Plan
	// Guarded: the sends are watched on the wire (a Transport), until the
	// base transport proves it cannot be (Unguard).
	Guarded bool
	// OnReclaim is called when a response body was not closed within the
	// longest hold of a lease (longestHold × LeaseFor): rule, how long.
	OnReclaim func(rule string, held time.Duration)
}

// Engine is the admission of the rules on one store: the store and its
// failure policy, how late this process sends, the store's clock, what was
// heard of keys, and the time seam. It is safe for concurrent use.
type Engine struct {
	policy    *policy     // the store and what to do when it fails (policy.go)
	late      lateness    // the allowance of this process's reservations (lateness.go)
	clock     *storeClock // the shared store's clock on this process's (clock.go)
	news      keyNews     // pauses and moves heard of while requests wait (news.go)
	onReclaim func(rule string, held time.Duration)

	// The time seam, the only way the engine reads or waits on time (tests
	// replace Sleep to make a process late): Now; Sleep, precise
	// (sleep.go); Nap, a plain timer for an early wake-up; After, for lease
	// renewals.
	Now   func() time.Time
	Sleep func(context.Context, time.Duration) error
	Nap   func(context.Context, time.Duration) error
	After func(time.Duration, func()) *time.Timer
}

// New returns the Engine of st.
func New(st contract.Store, c Config) (*Engine, error) {
	e := &Engine{Now: time.Now, Sleep: PreciseSleep, Nap: TimerSleep, After: time.AfterFunc, onReclaim: c.OnReclaim}
	e.clock = newStoreClock(st, e.Now())
	e.late.guarded.Store(c.Guarded)
	p, err := newPolicy(st, c, func() time.Time { return e.Now() })
	if err != nil {
		return nil, err
	}
	e.policy = p
	return e, nil
}

// Store is the shared store.
func (e *Engine) Store() contract.Store { return e.policy.shared }

// Guarded reports whether the sends are watched on the wire.
func (e *Engine) Guarded() bool { return e.late.guarded.Load() }

// Unguard says the base transport answered without reporting its
// connection: the sends cannot be watched on the wire.
func (e *Engine) Unguard() {
	if e.late.guarded.Load() {
		e.late.guarded.Store(false)
	}
}

// Learn records what an upstream said of key, through the failure
// policy, and lets the requests waiting on key hear of it. It reports
// whether the store (or FailLocal's limiter) recorded it: false with a nil
// error when the store keeps no feedback. A store marked down is a *Down.
func (e *Engine) Learn(ctx context.Context, key string, l contract.Learned, move bool) (bool, error) {
	_, recorded, err := e.LearnEffect(ctx, key, l, move)
	return recorded, err
}

// LearnEffect is Learn, and what the store says it did to the key's
// learned margin and pace (zero when the store does not say).
func (e *Engine) LearnEffect(ctx context.Context, key string, l contract.Learned, move bool) (contract.Effect, bool, error) {
	ef, recorded, err := e.policy.learn(ctx, key, l)
	if recorded {
		e.news.recorded(key, e.Now(), l.Pause, move)
	}
	return ef, recorded, err
}

// DefaultMargin is a rule's Margin when it sets none: enough on loopback and
// a quiet LAN for the time between handing a request on and the upstream
// counting it. The lateness a sample may add is capped by it (lateness.go);
// the CLI and the examples take it as their -margin flag's default.
const DefaultMargin = 5 * time.Millisecond

// MaxPer is the longest window a limit may have: a year, which keeps every
// time the scripts handle exact in Lua's numbers. A move to a learned pace
// is news for every slot placed before it (news.go).
const MaxPer = 366 * 24 * time.Hour

// Measured records a lateness of zero on the wire, as a process that has
// measured its sends does: tests of exact send times start there rather
// than from the cautious allowance of a process that has measured nothing.
func (e *Engine) Measured() { e.late.observe(e.Now(), 0, 0, true) }

// LocalLimits are the limits of the rule of scope as FailLocal's limiter
// counts them: each cut to the local share; nil without FailLocal.
func (e *Engine) LocalLimits(scope string) []contract.Limit {
	return e.policy.shares[scope].limits
}
