package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/throttle-go/throttle/store"
)

// Transport is an http.RoundTripper that keeps the requests it sends under
// the limits of its rules, in every process that shares its store. It is safe
// for concurrent use.
//
// Create one with New; the zero Transport is not usable.
//
// For each request it finds the rule that matches, derives the rate key,
// reserves the next free slot in the key's sliding log, waits for the slot (in
// Wait mode) and then hands the request, untouched, to the base transport. A
// request that cannot be sent is refused with an error and its body closed:
// a *LimitError (errors.Is ErrLimited), a *KeyError (ErrNoKey), an
// ErrInvalidCost, the context's error, or a store error.
type Transport struct {
	base         http.RoundTripper
	store        store.Store
	rules        []*rule
	def          *rule
	onDecision   func(Decision)
	onFeedback   func(Feedback) // feedback.go
	fb           feedbackState
	logger       *slog.Logger
	keySecret    []byte  // WithKeySecret; nil: none
	storeFailure failure // the policy and its state: failure.go
	now          func() time.Time
	sleep        func(context.Context, time.Duration) error // sleep, or a test's
	late         lateness                                   // lateness.go: the allowance of this process's reservations
}

var _ http.RoundTripper = (*Transport)(nil)

// An Option configures New.
type Option interface{ apply(*Transport) error }

type optionFunc func(*Transport) error

func (f optionFunc) apply(t *Transport) error { return f(t) }

// WithRule adds a rule. Rules may be given in any order; see Rule for which
// one a request gets.
func WithRule(r Rule) Option {
	return optionFunc(func(t *Transport) error {
		c, err := compile(r, false)
		if err != nil {
			return err
		}
		t.rules = append(t.rules, c)
		return nil
	})
}

// WithDefault sets the rule of requests that no other rule matches. Without
// one, such requests are sent without a limit.
func WithDefault(r Rule) Option {
	return optionFunc(func(t *Transport) error {
		if t.def != nil {
			return &ConfigError{Reason: "WithDefault given twice"}
		}
		c, err := compile(r, true)
		if err != nil {
			return err
		}
		t.def = c
		return nil
	})
}

// WithOnDecision calls f once per request with the transport's decision, on
// the request's goroutine: after the wait and before the send for Sent, before
// RoundTrip returns for the rest. f must be quick and safe for concurrent use.
func WithOnDecision(f func(Decision)) Option {
	return optionFunc(func(t *Transport) error {
		if f == nil {
			return &ConfigError{Reason: "WithOnDecision: nil function"}
		}
		t.onDecision = f
		return nil
	})
}

// WithLogger logs every decision to l: refusals at Info, store failures at
// Warn, the rest at Debug. The transport logs nothing without it.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(t *Transport) error {
		if l == nil {
			return &ConfigError{Reason: "WithLogger: nil logger"}
		}
		t.logger = l
		return nil
	})
}

// New returns a Transport that sends through base (http.DefaultTransport when
// nil) and keeps its state in st. It validates every option and does no I/O.
func New(base http.RoundTripper, st store.Store, opts ...Option) (*Transport, error) {
	if st == nil || isNilPointer(st) {
		return nil, &ConfigError{Reason: "nil store"}
	}
	if base == nil {
		base = http.DefaultTransport
	} else if isNilPointer(base) {
		return nil, &ConfigError{Reason: fmt.Sprintf("base is a nil %T (pass nil itself for http.DefaultTransport)", base)}
	}
	t := &Transport{base: base, store: st, now: time.Now, sleep: sleep}
	for _, o := range opts {
		if o == nil {
			return nil, &ConfigError{Reason: "nil option"}
		}
		if err := o.apply(t); err != nil {
			return nil, err
		}
	}
	if len(t.rules) == 0 && t.def == nil {
		return nil, &ConfigError{Reason: "no rules: give WithRule or WithDefault"}
	}
	// Rules of the same name share their logs, so they must count alike.
	byName := map[string]*rule{}
	for _, r := range append(slices.Clone(t.rules), t.def) {
		if r == nil {
			continue
		}
		if o, ok := byName[r.Name]; ok && (!slices.Equal(o.eff, r.eff) || o.Algorithm != r.Algorithm) {
			return nil, &ConfigError{Rule: r.Name, Reason: "rules of the same name share their logs and must have the same Limits, Margin and Algorithm"}
		}
		byName[r.Name] = r
	}
	if err := t.storeFailure.setup(t); err != nil {
		return nil, err
	}
	return t, nil
}

// match returns the rule of req, or nil.
func (t *Transport) match(req *http.Request) *rule {
	var best *rule
	bestScore := -1
	for _, r := range t.rules {
		if s, ok := r.matches(req); ok && s > bestScore {
			best, bestScore = r, s
		}
	}
	if best == nil {
		return t.def
	}
	return best
}

// RoundTrip implements http.RoundTripper. It never modifies req, and closes
// req.Body on every path where it does not hand req to the base transport.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil || req.URL == nil {
		closeBody(req)
		return nil, errors.New("throttle: nil request or URL")
	}
	ctx := req.Context()
	r := t.match(req)
	if r == nil {
		t.observe(ctx, Decision{Outcome: Unmatched})
		return t.base.RoundTrip(req)
	}
	d := Decision{Rule: r.Name, Attempt: attemptOf(ctx)}
	fail := func(err error) (*http.Response, error) {
		closeBody(req)
		d.Err = err
		t.observe(ctx, d)
		return nil, err
	}

	key, err := r.Key(req)
	if err == nil && key == "" {
		err = keyErr("the key function returned an empty key")
	}
	if err != nil {
		d.Outcome = Failed
		return fail(&KeyError{Rule: r.Name, Reason: err.Error()})
	}
	key = t.storeKey(key) // keysecret.go: HMAC with a secret, else long keys hashed
	d.Key = key
	if d.Cost, err = r.cost(req); err != nil {
		d.Outcome = Failed
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		d.Outcome = Canceled
		return fail(err)
	}

	// Each rule has its own logs: rules whose KeyFuncs derive the same key
	// (ByHost on two paths of one host) must not count against each other,
	// nor trim each other's entries with their shorter windows.
	skey := r.scope + key
	for {
		asked := t.now()
		wait := time.Duration(0)
		if r.Mode == Wait {
			wait = maxWait(ctx, asked, r.maxWait)
		}
		// The log records the request at its slot plus this process's
		// allowance (lateness.go); only the sliding log takes one.
		d.Allowance = 0
		if r.Margin > 0 && r.Algorithm == store.SlidingLog {
			d.Allowance = t.late.allowance(asked)
		}
		// reserve (failure.go) applies the store failure policy: st holds
		// the reservation; down says why the shared store did not decide.
		res, st, down, err := t.reserve(ctx, r, skey, store.Request{Limits: r.eff, Cost: d.Cost, MaxWait: wait, MaxServerWait: r.maxServerWait, Algorithm: r.Algorithm, Allowance: d.Allowance})
		d.Local = down != nil && t.storeFailure.policy == FailLocal
		d.Err = nil
		if d.Local {
			d.Err = down
			// The in-process limiter answered at once, after the failed
			// call to the shared store: that call is no lateness.
			asked = t.now()
		}
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				d.Outcome = Canceled
				return fail(ctxErr)
			}
			if t.storeFailure.policy == FailOpen && down != nil {
				d.Outcome, d.Err = FailedOpen, err
				t.observe(ctx, d)
				return t.base.RoundTrip(req)
			}
			if !errors.Is(err, ErrStoreUnavailable) {
				err = fmt.Errorf("throttle: rule %q: %w", r.Name, err)
			}
			d.Outcome = Failed
			return fail(err)
		}
		if res.Cause == store.CauseLimit && res.Limit < len(r.Limits) {
			d.Limit = r.Limits[res.Limit]
		}
		if !res.Allowed {
			if r.Margin > 0 && d.Allowance == 0 {
				// Before the process's first sample: a refusal's round
				// trip gives it one (lateness.go).
				now := t.now()
				t.late.observe(now, now.Sub(asked), d.Allowance)
			}
			up := res.Cause == store.CauseUpstream
			d.Outcome, d.RetryAfter, d.Upstream = Limited, res.RetryAfter, up
			return fail(&LimitError{Rule: r.Name, Key: key, Limit: d.Limit, RetryAfter: res.RetryAfter, Upstream: up})
		}

		d.Delay += res.Delay
		if err := t.sleep(ctx, res.Delay); err != nil {
			// The slot will not be used: give it back so that others
			// may. The caller's context is done and the caller must not
			// wait for Redis, so Cancel runs on its own goroutine and a
			// detached context that ends within cancelTimeout. It is best
			// effort: a failed Cancel only leaves the slot unused.
			go func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
				defer cancel()
				_ = st.Cancel(cctx, res)
			}()
			d.Outcome = Canceled
			return fail(err)
		}
		// A request that wakes later than its allowance plus half the
		// margin after its slot (a stalled or starved process) would send
		// into the headroom the margin keeps for the upstream's view of the
		// next window. It gives the slot back and takes the next free one
		// instead. Its lateness (an upper bound: from before the Reserve
		// call, so it includes the store's round trip) feeds the allowance
		// of the reservations to come.
		if r.Margin == 0 {
			break
		}
		woke := t.now()
		late := woke.Sub(asked) - res.Delay
		t.late.observe(woke, late, d.Allowance)
		if late <= d.Allowance+r.Margin/2 || d.Retaken == maxRetakes {
			break
		}
		// If the Cancel fails (the store just died), the old slot stays
		// recorded, which only over-counts: the request still retakes, so
		// the store failure policy decides rather than a late send.
		_ = st.Cancel(ctx, res)
		d.Retaken++
	}
	if !d.Local {
		t.mirror(r, skey, d.Cost) // failure.go: FailLocal's limiter sees shared sends too
	}
	d.Outcome = Sent
	t.observe(ctx, d)
	return t.send(ctx, r, key, skey, req) // retry.go
}

// maxRetakes bounds how often one request retakes a slot it woke too late for.
const maxRetakes = 2

func closeBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}
