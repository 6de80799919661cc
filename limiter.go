package throttle

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/internal/upstream"
	"github.com/throttle-go/throttle/store"
)

// Limiter keeps the uses of a resource under the limits of one rule, in
// every process that shares its store, without HTTP: a gRPC call, a cloud
// SDK's, a message sent to a queue. It is what each rule of a Transport runs
// on: the same store, algorithms, waits, store failure policy, decisions,
// logs and Stats. It is safe for concurrent use. Create one with
// NewLimiter; the zero Limiter is not usable.
//
// Its key is a rate key, as a KeyFunc would return it: a name such as a
// gateway's, or a hash of a credential (operator.CredentialKey), never a raw token,
// unless WithKeySecret is set, which replaces every key with its HMAC.
// A Limiter and a Transport rule of the same Name, with the same Limits,
// Margin and Algorithm, share their logs: they count against each other.
type Limiter struct {
	r *rule
	c *core
}

// core is what the rules of a Transport share, and a Limiter has for its
// one rule: the engine (internal/engine: the store, its failure policy, the
// admission and the time seam), the hooks, the logs and the key secret.
type core struct {
	eng        *engine.Engine
	logs       logLimiter
	onDecision func(Decision)
	onFeedback func(Feedback)
	logger     *slog.Logger
	keySecret  []byte     // nil: keys are hashed only when long (keyfunc.go)
	pub        *publisher // the rules published in the store (publish.go)
}

// newCore builds the core of c's rules on st; guarded says the sends are
// watched on the wire (a Transport).
func newCore(st store.Store, c config, guarded bool) (*core, error) {
	failure := engine.FailClosed
	switch {
	case c.failOpen && c.localShare != 0:
		return nil, &ConfigError{Reason: "WithFailOpen and WithFailLocal: a request that meets a failed store is sent uncounted or counted locally, not both"}
	case c.failOpen:
		failure = engine.FailOpen
	case c.localShare != 0:
		failure = engine.FailLocal
	}
	k := &core{onDecision: c.onDecision, onFeedback: c.onFeedback, logger: c.logger, keySecret: c.keySecret}
	ec := engine.Config{Failure: failure, Timeout: c.storeTimeout, Share: c.localShare,
		Guarded: guarded, OnReclaim: k.reclaimed}
	for _, r := range append(c.rules[:len(c.rules):len(c.rules)], c.def) {
		if r != nil {
			ec.Plans = append(ec.Plans, &r.plan)
		}
	}
	e, err := engine.New(st, ec)
	if err != nil {
		return nil, err
	}
	k.eng = e
	kind, rules := "limiter", append(c.rules[:len(c.rules):len(c.rules)], c.def)
	if guarded {
		kind = "transport"
	}
	k.pub = newPublisher(st, kind, slices.DeleteFunc(rules, func(r *rule) bool { return r == nil }), c.keySecret != nil, e.Now, c.logger)
	return k, nil
}

// now is the engine's clock.
func (c *core) now() time.Time { return c.eng.Now() }

// NewLimiter returns a Limiter that keeps its state in st, under r: its
// Name (required: it names the limiter's logs in the store), Limits, FailFast,
// MaxWait, MaxServerWait, Margin, Algorithm and Shadow. The fields that read an
// HTTP request (Host, PathPrefix, Method, Key, Also, Cost, IgnoreUpstream,
// Retries, Lanes, Lane, Tenant and Weights) are a *ConfigError, and so are a
// limit of a unit (Limit.Of: a Transport reads its costs from each request
// and response) and the options for a Transport's requests (WithRule,
// WithDefault, WithUnmatchedSent). It does no I/O.
func NewLimiter(st store.Store, r Rule, opts ...Option) (*Limiter, error) {
	c, err := configure(st, opts)
	if err != nil {
		return nil, err
	}
	switch {
	case len(c.rules) > 0 || c.def != nil:
		return nil, &ConfigError{Reason: "WithRule and WithDefault are for a Transport: a Limiter has NewLimiter's rule"}
	case c.unmatchedSet:
		return nil, &ConfigError{Reason: "WithUnmatchedSent is for a Transport: a Limiter matches no request"}
	}
	cr, err := limiterRule(r)
	if err != nil {
		return nil, err
	}
	c.rules = []*rule{cr}
	bindStats(c.rules, nil)
	k, err := newCore(st, c, false)
	if err != nil {
		return nil, err
	}
	return &Limiter{r: cr, c: k}, nil
}

// limiterRule validates the rule of a Limiter, as a Transport's default rule
// (it matches every use) that takes nothing from a request.
func limiterRule(r Rule) (*rule, error) {
	if r.Name == "" {
		return nil, &ConfigError{Reason: "a Limiter's Rule needs a Name: it names the limiter's logs in the store"}
	}
	var http []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Host", r.Host != ""}, {"PathPrefix", r.PathPrefix != ""}, {"Method", r.Method != ""},
		{"Key", r.Key != nil}, {"Also", r.Also != nil}, {"Cost", r.Cost != nil}, {"Costs", r.Costs != nil}, {"Actual", r.Actual.set()},
		{"IgnoreUpstream", r.IgnoreUpstream}, {"Retries", r.Retries != 0},
	} {
		if f.set {
			http = append(http, f.name)
		}
	}
	if len(http) > 0 {
		return nil, &ConfigError{Rule: r.Name, Reason: strings.Join(http, ", ") +
			" read HTTP requests: a Limiter takes its key and cost with each call"}
	}
	if r.Lanes != 0 || r.Lane != nil {
		return nil, &ConfigError{Rule: r.Name, Reason: "Lanes and Lane read a request's lane: a Limiter has no request, and would put every use in lane 0"}
	}
	if r.Tenant != nil || r.Weights != nil {
		return nil, &ConfigError{Rule: r.Name, Reason: "Tenant and Weights read a request's tenant: a Limiter has no request to read it from"}
	}
	if r.InFlight != 0 || r.LeaseFor != 0 {
		return nil, &ConfigError{Rule: r.Name, Reason: "InFlight and LeaseFor need a response to end the lease: a Limiter does not cap uses in flight"}
	}
	for _, l := range r.Limits {
		if l.Unit != "" {
			// A cost per unit and its settlement are read from the HTTP
			// request and response (docs/costs.md).
			return nil, &ConfigError{Rule: r.Name, Reason: fmt.Sprintf("a limit of the unit %q (Limit.Of) needs a Transport: "+
				"a Limiter's uses cost one number, its calls' cost", l.Unit)}
		}
	}
	return compile(r, true)
}

// Wait reserves a slot for cost units of key and waits for it. It returns
// nil when the caller may go ahead (also when the store failed and the
// policy is WithFailOpen), or why not, at once rather than after a wait that
// would be in vain: a *LimitError (errors.Is ErrLimited) when the slot is
// beyond the rule's MaxWait or the context's deadline (or FailFast finds
// none now); the context's error when it ends first, the slot given back; a
// *StoreError (ErrStoreUnavailable); a *KeyError for an empty key; or an
// ErrInvalidCost for a cost outside 1 to the least N of the limits.
func (l *Limiter) Wait(ctx context.Context, key string, cost int) error {
	d := l.decide(ctx, key, cost, l.r.maxWait)
	if d.Outcome == Sent || d.Outcome == FailedOpen || d.Shadow {
		return nil
	}
	return d.Err
}

// Allow reports whether cost units of key may go now, and records them if
// so; a refusal records nothing. The error is not a refusal but a failure to
// decide: a *StoreError (by default), the context's error, a *KeyError or
// ErrInvalidCost; under WithFailOpen a failed store allows.
func (l *Limiter) Allow(ctx context.Context, key string, cost int) (bool, error) {
	d := l.decide(ctx, key, cost, 0)
	if d.Shadow {
		return true, nil
	}
	switch d.Outcome {
	case Sent, FailedOpen:
		return true, nil
	case Limited:
		return false, nil
	}
	return false, d.Err
}

// decide admits one use of key, waiting at most maxWait for it, and
// observes the decision.
func (l *Limiter) decide(ctx context.Context, key string, cost int, maxWait time.Duration) Decision {
	k, err := l.keyed(key, cost)
	var d Decision
	if err != nil {
		d = l.r.failed(k, err)
	} else if l.r.Shadow {
		d = l.c.shadowed(ctx, l.r, k, maxWait) // shadow.go: recorded, never waited for
	} else {
		a := l.c.eng.Admit(ctx, l.r.current(), k.eng(), maxWait) // internal/engine
		d = l.r.decision(k, &a.Verdict)
	}
	l.c.observe(ctx, l.r.stats, d)
	return d
}

// keyed checks key and cost and derives the key as stored.
func (l *Limiter) keyed(key string, cost int) (keyed, error) {
	if key == "" {
		return keyed{cost: cost}, &KeyError{Rule: l.r.Name, Reason: "empty key"}
	}
	k := keyed{key: l.c.storeKey(key)} // keyfunc.go: HMAC with a secret, else long keys hashed
	k.skey = l.r.scope + k.key
	var err error
	k.cost, err = l.r.checkCost(cost)
	if err != nil {
		k.cost = cost // as asked, in the decision
	}
	return k, err
}

// Reserve reserves a slot for cost units of key, within the rule's MaxWait
// and the context's deadline, without waiting for it. Call the
// Reservation's Wait right before going ahead, or its Cancel if you will
// not. The errors are Wait's; under WithFailOpen, a failed store gives a
// Reservation without a slot, whose Wait returns nil at once.
func (l *Limiter) Reserve(ctx context.Context, key string, cost int) (*Reservation, error) {
	k, err := l.keyed(key, cost)
	rv := &Reservation{l: l, k: k}
	if err != nil {
		rv.d = l.r.failed(k, err)
	} else if l.r.Shadow {
		rv.d = l.c.shadowed(ctx, l.r, k, l.r.maxWait) // shadow.go
	} else if rv.a = l.c.eng.Reserve(ctx, l.r.current(), k.eng(), l.r.maxWait); rv.a.Held() { // internal/engine: the slot, not the wait
		return rv, nil
	} else {
		rv.d = l.r.decision(k, &rv.a.Verdict)
	}
	rv.done = true
	l.c.observe(ctx, l.r.stats, rv.d)
	if rv.d.Outcome == FailedOpen || rv.d.Shadow {
		return rv, nil
	}
	return nil, rv.d.Err
}

// Pause tells every process that shares the store that the upstream refused
// key's uses and asked to wait d: their next uses of key wait until d from
// now (a pause never shortens an earlier one; d is capped at an
// hour), or fail at once with a *LimitError whose Upstream is set
// if that is beyond the rule's MaxServerWait. A d of zero or less pauses
// for the rule's shortest window plus its Margin, as a 429 without
// Retry-After does. Call it when a gRPC call ends with RESOURCE_EXHAUSTED,
// with its RetryInfo's delay, or when a queue throttles a producer.
//
// The error is the store's, or a *StoreError when the store is marked down
// (under WithFailLocal the pause is kept in the process); a store that keeps no
// pauses is an error too.
func (l *Limiter) Pause(ctx context.Context, key string, d time.Duration) error {
	k, err := l.keyed(key, 1)
	if err != nil {
		return err
	}
	p := l.r.dialect.Learn(upstream.Said{Refused: true, RetryAfter: d, HasRetryAfter: d > 0}).Pause // internal/upstream
	recorded, err := l.c.eng.Learn(ctx, k.skey, contract.Learned{Pause: p}, false)
	switch {
	case recorded:
		l.r.stats.pauses.Add(1)
	case err == nil:
		err = fmt.Errorf("throttle: rule %q: the store (%T) keeps no pauses", l.r.Name, l.c.eng.Store())
	default:
		err = l.r.storeErr(err)
	}
	l.c.report(ctx, Feedback{Rule: l.r.Name, Key: k.key, Throttled: true, Pause: p, Err: err})
	return err
}

// Stats returns a snapshot of the limiter's counters: one entry in Rules.
func (l *Limiter) Stats() Stats {
	return Stats{Rules: []RuleStats{l.r.stats.snapshot()}}
}

// Reservation is a slot held by Limiter.Reserve. Call Wait right before
// going ahead (it waits for the slot, if it is still ahead), or Cancel if
// you will not go ahead; until then the slot stays recorded. The decision
// (WithOnDecision, the logger, Stats) is made by the first of the two. A
// Reservation is not safe for concurrent use.
type Reservation struct {
	l    *Limiter
	k    keyed
	a    engine.Admission
	d    Decision // when done
	done bool     // decided: Wait or Cancel was called, or there is no slot
}

// Delay returns how long from now until the slot; zero when it is due, or
// when the reservation is decided.
func (r *Reservation) Delay() time.Duration {
	if r.done {
		return 0
	}
	return r.a.Wait(r.l.c.now())
}

// Wait waits until the slot and returns nil when the caller may go ahead;
// calling it just before going ahead, after sleeping Delay or not, is how
// the limiter learns how late this process goes after its slots. If the
// process is late past what the rule's Margin allows, Wait gives the slot
// back and takes the next free one, within MaxWait and the context's
// deadline, as Limiter.Wait does, with the same errors. When ctx ends
// first, it returns ctx's error and gives the slot back. A second call
// returns the first's result.
func (r *Reservation) Wait(ctx context.Context) error {
	if !r.done {
		c := r.l.c
		c.eng.Finish(ctx, &r.a) // internal/engine: from the slot held
		r.done = true
		r.d = r.l.r.decision(r.k, &r.a.Verdict)
		c.observe(ctx, r.l.r.stats, r.d)
	}
	if r.d.Outcome == Sent || r.d.Outcome == FailedOpen || r.d.Shadow {
		return nil
	}
	return r.d.Err
}

// Cancel gives the slot back, so that others may use it, if neither Wait
// nor Cancel was called before; then it does nothing. It calls the store,
// for at most a second, and is best effort: a slot it fails to give back
// stays unused.
func (r *Reservation) Cancel() {
	if r.done {
		return
	}
	r.done = true
	r.l.c.eng.Cancel(&r.a, errCanceled)
	r.d = r.l.r.decision(r.k, &r.a.Verdict)
	r.l.c.observe(context.Background(), r.l.r.stats, r.d)
}
