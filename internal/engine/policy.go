package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// DefaultStoreTimeout bounds each call a request makes to the shared store
// when WithStoreTimeout sets no other bound.
const DefaultStoreTimeout = time.Second

// feedbackTimeout bounds the store call that records feedback; it runs on a
// context detached from the request's, which may end with the response.
const feedbackTimeout = time.Second

// Backoff between probes of a store marked down. The randomisation keeps the
// probes of a fleet apart; the largest wait is ProbeMaxInterval ×
// (1 + ProbeRandomization) = 600ms, so that requests use the store again
// within about a second of its return, the probe's own round trip included.
const (
	ProbeInitialInterval = 50 * time.Millisecond
	ProbeMaxInterval     = 500 * time.Millisecond
	ProbeRandomization   = 0.2
	probeMultiplier      = 2
)

// policy is the store failure policy: it calls the shared store (with a
// timeout, unless the store is in-process), tracks its health, and when it
// fails or is marked down applies FailClosed, FailOpen or FailLocal.
type policy struct {
	kind     Failure
	shared   contract.Store
	feedback contract.Feedback // shared's, nil when it keeps no feedback
	timeout  time.Duration     // 0: the store is in-process and needs no timer
	health   health

	// FailLocal: the in-process limiter and each rule's share of its
	// limits, by rule scope; read-only after newPolicy.
	local  contract.Store
	shares map[string]localShare
}

// localShare is a rule's limits cut to the local share.
type localShare struct {
	limits []contract.Limit
	minN   int           // the least N: a cost above it cannot be counted locally
	maxPer time.Duration // the longest window
	share  float64       // the share, for the limits of Also (multikey.go)
	// inFlight is the rule's InFlight cut alike (lease.go).
	inFlight int
}

// newPolicy prepares the policy of c, and its local limiter.
func newPolicy(st contract.Store, c Config, now func() time.Time) (*policy, error) {
	p := &policy{kind: c.Failure, shared: st, timeout: c.Timeout}
	if st.Caps().Feedback {
		p.feedback = st
	}
	p.health.now = now
	if p.timeout == 0 {
		p.timeout = DefaultStoreTimeout
	}
	// A Memory store never waits on anything but its lock, and a timer per
	// call would cost it more than the call.
	if st.Caps().InProcess {
		p.timeout = 0
	}
	if p.kind != FailLocal {
		return p, nil
	}
	m, err := store.NewMemory(store.WithClock(now))
	if err != nil {
		return nil, err
	}
	p.local, p.shares = m, make(map[string]localShare)
	for _, r := range c.Plans {
		s := shareOf(r.Limits, c.Share)
		s.inFlight = shareOfCap(r.InFlight, c.Share)
		p.shares[r.Scope] = s
	}
	return p, nil
}

// shareOf cuts every N of limits to floor(N × share), at least 1.
func shareOf(limits []contract.Limit, share float64) localShare {
	s := localShare{share: share}
	for _, l := range limits {
		// The epsilon keeps 300 × (1/3) at 100 despite rounding.
		n := max(1, int(math.Floor(float64(l.N)*share+1e-9)))
		// A paced limit keeps its spacing's share and its burst's.
		b := min(int(math.Floor(float64(l.Burst)*share+1e-9)), n)
		l.N, l.Burst = n, b
		s.limits = append(s.limits, l)
		if s.minN == 0 || n < s.minN {
			s.minN = n
		}
		if l.Paced && b+1 < s.minN {
			s.minN = b + 1
		}
		s.maxPer = max(s.maxPer, l.Per)
	}
	return s
}

// grant is the policy's answer to a reservation.
type grant struct {
	res  contract.Reservation
	from contract.Store // holds res, for Cancel
	// err is the failure when nothing was decided: the store's error when
	// the context ended, a *Down, or the local limiter's error.
	err error
	// down is the *Down when the shared store did not decide; local is set
	// when the policy is FailLocal then, open when it is FailOpen (send
	// uncounted).
	down        *Down
	local, open bool
}

// reserve reserves a slot for req under r, in the shared store or, when that
// fails or is marked down, as the policy says.
func (p *policy) reserve(ctx context.Context, r *Plan, skey string, req contract.Request) grant {
	try := p.health.begin(p.health.now())
	var cause error
	if try == skip {
		cause = p.health.lastError()
	} else {
		res, err := p.call(ctx, skey, req)
		switch {
		case err == nil:
			p.health.succeeded()
			return grant{res: res, from: p.shared}
		case ctx.Err() != nil:
			// The caller gave up; that says nothing about the store.
			p.health.abandoned(try)
			return grant{err: err}
		case errors.Is(err, store.ErrKeyState), errors.Is(err, contract.ErrInvalidRequest):
			// The store answered: one key's state is wrong, or it cannot
			// take this request, and that is this request's failure
			// alone. Nothing is marked down, and nothing is sent
			// uncounted.
			p.health.succeeded()
			return grant{err: err}
		case errors.Is(err, store.ErrEvictingPolicy):
			// The store answered and refuses the server: a configuration
			// to fix, not an outage. Every policy fails closed, so that no
			// request is sent uncounted or under a local share while the
			// fleet believes it is counted; nothing is marked down.
			p.health.succeeded()
			down := &Down{Err: err}
			return grant{err: down, down: down}
		}
		p.health.failed(try, p.health.now(), err)
		cause = err
	}
	down := &Down{Err: cause, NotTried: try == skip}
	switch p.kind {
	case FailOpen:
		return grant{err: down, down: down, open: true}
	case FailLocal:
		s := p.shares[r.Scope]
		if req.Cost > s.minN {
			down.Detail = fmt.Sprintf(" (and cost %d is above the local share of a limit, %d)", req.Cost, s.minN)
			return grant{err: down, down: down, local: true}
		}
		req.Limits = s.limits
		req.Again, req.Tag = false, 0 // a retake's tag is the shared store's
		var ok bool
		if req.Also, ok = s.alsoShare(req.Also, req.Cost); !ok {
			down.Detail = fmt.Sprintf(" (and cost %d is above the local share of a limit of Also)", req.Cost)
			return grant{err: down, down: down, local: true}
		}
		if req.InFlight > 0 {
			req.InFlight = s.inFlight
		}
		res, err := p.local.Reserve(ctx, skey, req)
		return grant{res: res, from: p.local, err: err, down: down, local: true}
	}
	return grant{err: down, down: down}
}

// call is one Reserve of the shared store, bounded by the timeout. A call cut
// by it returns an error matching ErrTimeout, not the context's
// DeadlineExceeded, which a caller would take for its own deadline.
func (p *policy) call(ctx context.Context, skey string, req contract.Request) (contract.Reservation, error) {
	if p.timeout == 0 {
		return p.shared.Reserve(ctx, skey, req)
	}
	sctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	res, err := p.shared.Reserve(sctx, skey, req)
	if err != nil && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
		err = &timeoutError{p.timeout}
	}
	return res, err
}

// learn records what the upstream said about skey: in the shared store, or
// in the local limiter while the shared store is marked down under FailLocal.
// It reports whether a store recorded l.
func (p *policy) learn(ctx context.Context, skey string, l contract.Learned) (e contract.Effect, recorded bool, err error) {
	var fb contract.Feedback = p.feedback
	if p.health.isDown.Load() {
		if p.kind != FailLocal {
			return e, false, &Down{Err: p.health.lastError(), NotTried: true}
		}
		fb = p.local
	}
	if fb == nil {
		return e, false, nil
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), feedbackTimeout)
	defer cancel()
	if ef, ok := fb.(contract.Effector); ok {
		e, err = ef.LearnEffect(lctx, skey, l)
	} else {
		err = fb.Learn(lctx, skey, l)
	}
	if err != nil {
		return contract.Effect{}, false, err
	}
	return e, true, nil
}

// mirror records a send that the shared store admitted in the local limiter
// too (FailLocal only), at the time of sending, so that when the store goes
// away the local limiter starts from this process's own recent sends, not
// from an empty log. A process that sent more than its share has the excess
// recorded up to a window ahead (it waits longer once local); what does not
// fit is not recorded.
func (p *policy) mirror(r *Plan, k Keys) {
	if p.local == nil {
		return
	}
	s := p.shares[r.Scope]
	if k.Cost > s.minN {
		return
	}
	// The rule's algorithm, as reserve uses: each keeps its own state.
	also, ok := s.alsoShare(k.Also, k.Cost)
	if !ok {
		return
	}
	_, _ = p.local.Reserve(context.Background(), k.Key,
		contract.Request{Limits: s.limits, Cost: k.Cost, MaxWait: s.maxPer, Algorithm: r.Algorithm, Also: also})
}

// alsoShare cuts the limits of parts to the local share s (FailLocal), nil
// when there are none, and reports whether cost fits every cut limit.
func (s localShare) alsoShare(parts []contract.Part, cost int) ([]contract.Part, bool) {
	if parts == nil {
		return nil, true
	}
	out := make([]contract.Part, len(parts))
	for i, p := range parts {
		cut := shareOf(p.Limits, s.share)
		c := cost
		if p.Unit != "" {
			c = p.Cost // a unit's own cost (contract.Part.Unit)
		}
		if c > cut.minN {
			return nil, false
		}
		out[i] = p
		out[i].Limits = cut.limits
	}
	return out, true
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
			backoff.WithInitialInterval(ProbeInitialInterval),
			backoff.WithMaxInterval(ProbeMaxInterval),
			backoff.WithRandomizationFactor(ProbeRandomization),
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
