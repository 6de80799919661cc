package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/throttle-go/throttle/store"
)

// StoreFailure says what a request does when the shared store fails, or is
// marked down after a failure (see WithStoreFailure).
type StoreFailure int

const (
	// FailClosed refuses the request with a *StoreError (errors.Is
	// ErrStoreUnavailable) wrapping the store's error; nothing is sent. It is
	// the default.
	FailClosed StoreFailure = iota
	// FailOpen sends the request without counting it anywhere.
	FailOpen
	// FailLocal counts the request in a limiter inside this process instead,
	// with the share of every limit given by WithLocalShare, under the same
	// rules, keys, modes and waits. Decision.Local says so.
	FailLocal
)

var storeFailureNames = [...]string{"FailClosed", "FailOpen", "FailLocal"}

func (p StoreFailure) String() string {
	if p < 0 || int(p) >= len(storeFailureNames) {
		return fmt.Sprintf("StoreFailure(%d)", int(p))
	}
	return storeFailureNames[p]
}

// WithStoreFailure sets what requests do when the shared store fails:
// FailClosed (the default), FailOpen or FailLocal (which needs
// WithLocalShare).
//
// Whatever the policy, a store failure (an error that is not the request's
// context ending) marks the store down: until a probe succeeds, requests do
// not call it and take the policy's path at once, so a dead Redis costs one
// request a connect timeout, not every request. While it is down, one request
// at a time is let through to the store as a probe, after a backoff that
// starts at 50ms and doubles up to at most 600ms; the first probe that succeeds marks
// the store up again, and its answer is used.
func WithStoreFailure(p StoreFailure) Option {
	return optionFunc(func(t *Transport) error {
		if p < FailClosed || p > FailLocal {
			return &ConfigError{Reason: fmt.Sprintf("unknown StoreFailure %d", int(p))}
		}
		t.storeFailure.policy = p
		return nil
	})
}

// WithLocalShare sets the share of every limit that the in-process limiter
// of FailLocal allows this transport while the shared store is away: a limit
// of N per W becomes floor(N × share) per W, at least 1. With one transport per
// worker, 1/workers keeps the fleet within the limit once every worker is
// local (see the README for the moments of switching). While the shared
// store is up, every send it admits is recorded in the local limiter too, so
// that a switch to local starts from this process's recent sends. It requires
// WithStoreFailure(FailLocal), and share must be in (0, 1].
func WithLocalShare(share float64) Option {
	return optionFunc(func(t *Transport) error {
		if math.IsNaN(share) || share <= 0 || share > 1 {
			return &ConfigError{Reason: fmt.Sprintf("WithLocalShare(%v): the share must be above 0 and at most 1", share)}
		}
		t.storeFailure.share = share
		return nil
	})
}

// DefaultStoreTimeout bounds each call a request makes to the shared store
// when WithStoreTimeout sets no other bound.
const DefaultStoreTimeout = time.Second

// WithStoreTimeout bounds each Reserve call to the shared store (default
// DefaultStoreTimeout). A call that takes longer, while the request's own
// context is still live, is a store failure: it marks the store down like
// any other. Without the bound, a client that retries its dials (go-redis
// tries 5 dials per attempt and 4 attempts by default, about 2s against a
// closed port) would make the request's context end first, which says
// nothing about the store, and every request would pay it.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(t *Transport) error {
		if d <= 0 {
			return &ConfigError{Reason: fmt.Sprintf("WithStoreTimeout(%s): the timeout must be positive", d)}
		}
		t.storeFailure.timeout = d
		return nil
	})
}

// errStoreTimeout is the cause of a StoreError for a call cut by the timeout.
type errStoreTimeout struct {
	d   time.Duration
	err error
}

func (e *errStoreTimeout) Error() string {
	return fmt.Sprintf("no answer within %s (WithStoreTimeout): %v", e.d, e.err)
}
func (e *errStoreTimeout) Unwrap() error { return e.err }

// Backoff between probes of a store marked down. The randomisation keeps the
// probes of a fleet apart; the largest wait is probeMaxInterval ×
// (1 + probeRandomization) = 600ms, so that requests use the store again
// within about a second of its return, the probe's own round trip included.
const (
	probeInitialInterval = 50 * time.Millisecond
	probeMaxInterval     = 500 * time.Millisecond
	probeRandomization   = 0.2
	probeMultiplier      = 2
)

// failure is a transport's store failure policy and the state behind it.
type failure struct {
	policy  StoreFailure
	timeout time.Duration // bound of each store call; 0: DefaultStoreTimeout
	share   float64       // FailLocal: the share of each limit
	local   *store.Memory // FailLocal: the in-process limiter
	health  health
}

// setup validates the policy once every option is applied and, for
// FailLocal, prepares the local limiter and every rule's local limits.
func (f *failure) setup(t *Transport) error {
	if f.timeout == 0 {
		f.timeout = DefaultStoreTimeout
	}
	f.health.now = func() time.Time { return t.now() }
	if f.policy != FailLocal {
		if f.share != 0 {
			return &ConfigError{Reason: "WithLocalShare needs WithStoreFailure(FailLocal)"}
		}
		return nil
	}
	if f.share == 0 {
		return &ConfigError{Reason: "FailLocal needs WithLocalShare: the share of each limit this transport may use alone"}
	}
	m, err := store.NewMemory(store.WithClock(func() time.Time { return t.now() }))
	if err != nil {
		return err
	}
	f.local = m
	for _, r := range append(t.rules[:len(t.rules):len(t.rules)], t.def) {
		if r == nil {
			continue
		}
		r.local = make([]Limit, len(r.eff))
		r.localMinN = 0
		for i, l := range r.eff {
			// The epsilon keeps 300 × (1/3) at 100 despite rounding.
			n := max(1, int(math.Floor(float64(l.N)*f.share+1e-9)))
			r.local[i] = Limit{N: n, Per: l.Per, Precision: l.Precision}
			if r.localMinN == 0 || n < r.localMinN {
				r.localMinN = n
			}
			r.localMaxPer = max(r.localMaxPer, l.Per)
		}
	}
	return nil
}

func noop() {}

// reserve reserves a slot for req in the shared store or, when that fails or
// is marked down and the policy is FailLocal, in the local limiter. It returns
// the store that holds the reservation (for Cancel) and, when the shared
// store could not decide, why. Its error is the store's when the context
// ended, that *StoreError when the policy is not FailLocal, and the local
// limiter's refusal or failure otherwise.
func (t *Transport) reserve(ctx context.Context, r *rule, key string, req store.Request) (res store.Reservation, st store.Store, down *StoreError, err error) {
	h := &t.storeFailure.health
	var cause error
	try := h.begin(t.now())
	if try != skip {
		// The timeout is for stores that do I/O; a Memory store never waits
		// on anything but its lock, and a timer per call would cost it more
		// than the call (3 allocations and a timer).
		sctx, cancel := ctx, context.CancelFunc(noop)
		if _, inProcess := t.store.(*store.Memory); !inProcess {
			sctx, cancel = context.WithTimeout(ctx, t.storeFailure.timeout)
		}
		res, err := t.store.Reserve(sctx, key, req)
		cancel()
		switch {
		case err == nil:
			h.succeeded()
			return res, t.store, nil, nil
		case ctx.Err() != nil:
			// The caller gave up; that says nothing about the store.
			h.abandoned(try)
			return res, nil, nil, err
		case sctx.Err() != nil:
			err = &errStoreTimeout{t.storeFailure.timeout, err}
		}
		h.failed(try, t.now(), err)
		cause = err
	} else {
		cause = h.lastError()
	}
	down = &StoreError{Rule: r.Name, Err: cause, NotTried: try == skip}
	if t.storeFailure.policy != FailLocal {
		return res, nil, down, down
	}
	if req.Cost > r.localMinN {
		return res, nil, down, fmt.Errorf("%w (and cost %d is above the local share of a limit, %d)", down, req.Cost, r.localMinN)
	}
	req.Limits = r.local
	if res, err = t.storeFailure.local.Reserve(ctx, key, req); err != nil {
		return res, nil, down, err
	}
	return res, t.storeFailure.local, down, nil
}

// mirror records a send that the shared store admitted in the local limiter
// too (FailLocal only), at the time of sending, so that when the store goes
// away the local limiter starts from this process's own recent sends, not
// from an empty log: a process that used its share of the last window waits
// for it to pass instead of adding a share on top. A process that sent more
// than its share has the excess recorded up to a window ahead (it waits
// longer once local); what does not fit is not recorded.
func (t *Transport) mirror(r *rule, key string, cost int) {
	if t.storeFailure.local == nil || cost > r.localMinN {
		return
	}
	// The rule's algorithm, as reserve uses: each keeps its own state.
	_, _ = t.storeFailure.local.Reserve(context.Background(), key,
		store.Request{Limits: r.local, Cost: cost, MaxWait: r.localMaxPer, Algorithm: r.Algorithm})
}

// attempt says how a request may use the shared store.
type attempt int

const (
	skip  attempt = iota // the store is down and another probe is due later
	use                  // the store is up
	probe                // the store is down and this request probes it
)

// health tracks whether the shared store is up. It is safe for concurrent use
// and never holds its lock across a call to the store.
//
// A store failure marks it down and starts a fresh backoff (one per outage,
// used under the lock only, since a backoff is not safe for concurrent use).
// While it is down, begin lets one request at a time through as a probe once
// the backoff's interval has passed; the others skip the store. Races: a
// request that began before the store was marked down may still fail or
// succeed after; a failure then does not advance the backoff (only probes
// do), and a success marks the store up, which it evidently is.
type health struct {
	now func() time.Time // the transport's clock, for the backoff

	// isDown mirrors down for the lock-free fast path of a healthy store.
	isDown atomic.Bool

	mu      sync.Mutex
	down    bool
	probing bool
	next    time.Time // down: the earliest time of the next probe
	bo      *backoff.ExponentialBackOff
	last    error // the failure that marked the store down, or the last probe's
}

func (h *health) begin(now time.Time) attempt {
	if !h.isDown.Load() {
		return use
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.down:
		return use
	case h.probing || now.Before(h.next):
		return skip
	default:
		h.probing = true
		return probe
	}
}

func (h *health) succeeded() {
	if !h.isDown.Load() {
		return // the common case: no lock
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down, h.probing, h.bo, h.last = false, false, nil, nil
	h.isDown.Store(false)
}

func (h *health) abandoned(a attempt) {
	if a != probe {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.probing = false // h.next has passed: the next request probes
}

func (h *health) failed(a attempt, now time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.down:
		h.down, h.last = true, err
		h.isDown.Store(true)
		h.bo = backoff.NewExponentialBackOff(
			backoff.WithClockProvider(clockFunc(h.now)),
			backoff.WithInitialInterval(probeInitialInterval),
			backoff.WithMaxInterval(probeMaxInterval),
			backoff.WithRandomizationFactor(probeRandomization),
			backoff.WithMultiplier(probeMultiplier),
			backoff.WithMaxElapsedTime(0), // probe for as long as it takes
		)
		h.next = now.Add(h.bo.NextBackOff())
	case a == probe:
		h.probing, h.last = false, err
		h.next = now.Add(h.bo.NextBackOff())
	}
}

// clockFunc makes the transport's clock a backoff.Clock.
type clockFunc func() time.Time

func (c clockFunc) Now() time.Time { return c() }

func (h *health) lastError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		// Marked up again between begin and now: say so rather than nil.
		return errors.New("marked down after a failure")
	}
	return h.last
}
