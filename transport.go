package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/store"
)

// Transport is an http.RoundTripper that keeps the requests it sends under
// the limits of its rules, in every process that shares its store. It is safe
// for concurrent use. Create one with New; the zero Transport is not usable.
//
// A request that cannot be sent is refused with an error and its body closed:
// a *LimitError (errors.Is ErrLimited), a *KeyError, an ErrInvalidCost, the
// context's error, a *StoreError (errors.Is ErrStoreUnavailable), or an
// *UnmatchedError when no rule matches it (see WithUnmatchedSent).
type Transport struct {
	// The store, its failure policy, the lateness, the hooks, the logs
	// and the time seam, which every rule shares: a rule's admission is a
	// Limiter's (limiter.go, admit.go).
	*core

	base      http.RoundTripper
	rules     []*rule
	def       *rule
	shadows   []*rule // the shadow rules, matched apart (shadow.go)
	fb        feedbackState
	unmatched unmatchedPolicy
	warned    warnedHosts // the hosts warned of (unmatched.go)

	// What an operator sees: counters (metrics.go); logs are the core's.
	stats          []*ruleStats // per rule name
	unmatchedStats ruleStats    // the requests no rule matched
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that sends through base (http.DefaultTransport when
// nil) and keeps its state in st. It validates every option and does no I/O.
func New(base http.RoundTripper, st store.Store, opts ...Option) (*Transport, error) {
	c, err := configure(st, opts)
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = http.DefaultTransport
	} else if isNilPointer(base) {
		return nil, &ConfigError{Reason: fmt.Sprintf("base is a nil %T (pass nil itself for http.DefaultTransport)", base)}
	}
	if len(c.rules) == 0 && c.def == nil {
		return nil, &ConfigError{Reason: "no rules: give WithRule or WithDefault"}
	}
	if c.unmatchedSet && c.def != nil {
		return nil, &ConfigError{Reason: "WithUnmatchedSent and WithDefault: with a default rule every request matches one"}
	}
	rules := append(slices.Clone(c.rules), c.def)
	if err := checkNames(rules); err != nil {
		return nil, err
	}
	if err := checkShadows(c.rules, c.def); err != nil { // shadow.go
		return nil, err
	}
	if err := checkLeases(st, rules); err != nil { // rule.go
		return nil, err
	}
	k, err := newCore(st, c, true) // guarded: until the base proves it is not net/http (wire.go)
	if err != nil {
		return nil, err
	}
	t := &Transport{core: k, base: base, def: c.def, unmatched: c.unmatched}
	t.rules, t.shadows = splitShadows(c.rules)
	t.stats = bindStats(c.rules, c.def)
	return t, nil
}

// RoundTrip implements http.RoundTripper: match a rule, derive the key, admit
// (reserve a slot and wait for it), send, listen to the response, and retry a
// throttled one if the rule says so. It never modifies req, and closes
// req.Body on every path where it does not hand req to the base transport.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil || req.URL == nil {
		closeBody(req)
		return nil, errors.New("throttle: nil request or URL")
	}
	ctx := req.Context()
	t.shadow(ctx, req) // shadow.go: what a shadow rule would do; it never holds req back
	r := t.match(req)
	if r == nil {
		return t.sendUnmatched(ctx, req) // unmatched.go: refuse, send, or warn and send
	}
	k, err := t.keyOf(r, req)
	if err != nil {
		closeBody(req)
		t.observe(ctx, r.stats, Decision{Rule: r.Name, Key: k.key, Outcome: Failed, Err: err})
		return nil, err
	}
	resp, heard, err := t.attempt(ctx, r, k, 0, req)
	if err != nil || !r.retries(req, heard) {
		return resp, err
	}
	return t.retry(ctx, r, k, req, resp, heard) // retry.go
}

// attempt admits one send of req under r, sends it and listens to the
// response. Attempt n > 0 is the n-th retry.
func (t *Transport) attempt(ctx context.Context, r *rule, k keyed, n int, req *http.Request) (*http.Response, heard, error) {
	a := t.eng.Admit(ctx, r.current(), k.eng(), r.maxWait) // internal/engine
	if !a.Sendable() {
		d := r.decision(k, &a.Verdict) // decision.go
		d.Attempt = n
		t.observe(ctx, r.stats, d)
		closeBody(req)
		return nil, heard{}, d.Err
	}
	req, w := t.onWire(ctx, req, r, k, n, a) // wire.go: checked, and retaken if late, before it is written
	if w == nil {
		d := r.decision(k, &a.Verdict)
		d.Attempt = n
		t.observe(ctx, r.stats, d)
	}
	resp, err := t.base.RoundTrip(req)
	if w != nil {
		a = w.sent(err == nil && resp != nil) // the wire reported the Decision once, after its check
	}
	lease := a.Verdict.Lease
	if err != nil || resp == nil {
		lease.Release()
		return resp, heard{}, err
	}
	bindLease(lease, resp)                                        // wire.go
	t.bill(ctx, r, k, &a, resp)                                   // cost.go: the units settled as the body passes
	return resp, t.listen(ctx, r, k, resp, sendingOf(r, &a)), nil // feedback.go
}

// keyed is a request's rate key under its rule: as reported (key), as stored
// (skey: each rule has its own logs, so that rules whose KeyFuncs derive the
// same key do not count against each other), and its cost.
type keyed struct {
	key, skey string
	cost      int
	also      []contract.Part // the rule's Also, keyed (multikey.go), then its units' estimates (cost.go)
	lane      int             // Rule.Lane's (lanes.go)
	// tenant is Rule.Tenant's, as reported (keyed as keys are), stenant
	// as stored (hashed), and step its tag's step (tenants.go).
	tenant, stenant string
	step            int64
}

// eng is k as the engine takes it.
func (k keyed) eng() engine.Keys {
	return engine.Keys{Key: k.skey, Cost: k.cost, Also: k.also, Lane: k.lane, Tenant: k.stenant, Step: k.step}
}

// keyOf derives the rate key and the cost of req under r.
func (t *Transport) keyOf(r *rule, req *http.Request) (keyed, error) {
	key, err := r.Key(req)
	if err == nil && key == "" {
		err = keyErr("the key function returned an empty key")
	}
	if err != nil {
		return keyed{}, &KeyError{Rule: r.Name, Reason: err.Error()}
	}
	t.pub.noteKey(r.Name, key)       // publish.go: its scheme, never the key
	k := keyed{key: t.storeKey(key)} // keyfunc.go: HMAC with a secret, else long keys hashed
	k.skey = r.scope + k.key
	if r.also != nil {
		if err := t.keyAlso(r, req, &k); err != nil { // multikey.go
			return keyed{}, err
		}
	}
	k.cost, err = r.cost(req)
	if err == nil {
		k.lane, err = r.lane(req) // lanes.go
	}
	if err == nil && r.plan.Tenants {
		var name string
		if name, k.step, err = r.tenant(req, k.cost); err == nil { // tenants.go
			k.tenant = t.storeKey(name) // as a key: keyed with the secret, or long names hashed
			k.stenant = tenantMember(k.tenant)
		}
	}
	if err == nil && r.counts {
		var units []contract.Part
		units, err = r.unitCosts(req, k.also) // cost.go
		k.also = append(k.also[:len(k.also):len(k.also)], units...)
	}
	return k, err
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

// CloseIdleConnections closes the idle connections of the base transport,
// when it has such a method, so that http.Client.CloseIdleConnections works
// through the Transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func closeBody(req *http.Request) {
	if req != nil && req.Body != nil {
		_ = req.Body.Close()
	}
}
