// Package operator holds the tools an operator uses on the state a fleet
// shares: the rate key of a credential, the store key of a rate key, and
// one key's usage, read without changing it. The throttle command (cmd/throttle)
// is built on it; a service may use it to show a key's state.
//
//	rk, err := operator.CredentialKey("bearer", token)
//	u, err := operator.Usage(ctx, tr, "github", rk)
//	fmt.Println(u.Limits[0].Used, u.Next)
package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/inspect"
)

// ErrUnknownRule is matched, with errors.Is, by the error of Usage and
// StoreKey for a rule name the Transport does not have.
var ErrUnknownRule = errors.New("operator: no rule of that name")

// ErrNoUsage is matched, with errors.Is, by the error of Usage when the
// Transport's store cannot report usage.
var ErrNoUsage = errors.New("operator: the store cannot report usage")

// errNoTransport is the error for a nil Transport, or one not made by
// throttle.New.
var errNoTransport = errors.New("operator: a nil or zero Transport (make one with throttle.New)")

// CredentialKey returns the rate key that a built-in KeyFunc derives from a
// request carrying credential, so that a tool can find a token's state
// without a request: by is "bearer" (ByAuthorization and ByBearerToken: the
// credential after the scheme), "query:<param>" (ByQuery) or
// "header:<Name>" (ByHeader). The key holds a hash of the credential, never
// the credential; no error holds it either. Its errors are *throttle.KeyError.
func CredentialKey(by, credential string) (string, error) {
	return inspect.CredentialKey(by, credential)
}

// StoreKey returns the key under which t's rule named rule stores the state
// of rateKey, exactly as a request would: the rule's scope ("<rule>:"), then
// rateKey HMAC'd with WithKeySecret's secret when there is one, else hashed
// when longer than 200 bytes. rateKey is the key as the rule's KeyFunc
// returns it ("bearer:<hash>" from ByAuthorization, "pg1" from Fixed; see
// CredentialKey), never a raw token. The result is the store's key (a Redis
// store adds its prefix and braces around it).
//
// Errors: ErrUnknownRule, or a *throttle.KeyError for an empty key or a rule
// whose keys start with a hash tag only a request gives (Rule.Also).
func StoreKey(t *throttle.Transport, rule, rateKey string) (string, error) {
	v, r, err := ruleOf(t, rule)
	if err != nil {
		return "", err
	}
	return storeKey(v, r, rateKey)
}

// Usage reports the state of one rate key of t's rule named rule, in one
// read-only call to the store: units used per limit, the next free slot a
// request of cost 1 would get, the upstream's pause, learned limit, learned
// pace, learned margin and budget. rateKey is the key as the rule's KeyFunc returns it, not
// a raw token: derive it from a token with CredentialKey. The stored key is
// derived as for a request (see StoreKey), and the limits are those a
// request reserves, under the rule's Algorithm: the rule's with its Margin
// (Per includes it), then, under the default shape, the pace the rule keeps
// by default (Rule.NoDefaultPace), one more entry of Limits.
//
// Errors: StoreKey's, ErrNoUsage, or the store's. It calls the store
// directly, not through the failure policy: a store that is down gives its
// error.
//
// For a rule with InFlight, it also reads the key's leases and queue, in
// one more call.
func Usage(ctx context.Context, t *throttle.Transport, rule, rateKey string) (KeyUsage, error) {
	return usage(ctx, t, rule, rateKey)
}

// LimiterUsage reports the state of key of l, as Usage does for a rule of a
// Transport: key is the one given to l.Wait, Allow or Reserve. Errors:
// a *throttle.KeyError for an empty key, ErrNoUsage, or the store's.
func LimiterUsage(ctx context.Context, l *throttle.Limiter, key string) (KeyUsage, error) {
	v, ok := inspect.Transport(l)
	if !ok || len(v.Rules) != 1 {
		return KeyUsage{}, errNoLimiter
	}
	return usage(ctx, l, v.Rules[0].Name, key)
}

// errNoLimiter is the error for a nil Limiter, or one not made by
// throttle.NewLimiter.
var errNoLimiter = errors.New("operator: a nil or zero Limiter (make one with throttle.NewLimiter)")

func usage(ctx context.Context, t any, rule, rateKey string) (KeyUsage, error) {
	v, r, err := ruleOf(t, rule)
	if err != nil {
		return KeyUsage{}, err
	}
	key, err := storeKey(v, r, rateKey)
	if err != nil {
		return KeyUsage{}, err
	}
	if !v.Store.Caps().Usage {
		return KeyUsage{}, fmt.Errorf("%w (%T)", ErrNoUsage, v.Store)
	}
	u, err := v.Store.Usage(ctx, key, contract.Request{Limits: r.Limits, Cost: 1, Algorithm: r.Algorithm})
	if err != nil {
		return KeyUsage{}, err
	}
	o := usageOf(u)
	if r.InFlight > 0 {
		li, ok := v.Store.(contract.LeaseInspector)
		if !ok {
			return KeyUsage{}, fmt.Errorf("%w: its leases (%T)", ErrNoUsage, v.Store)
		}
		lu, err := li.LeaseUsage(ctx, key)
		if err != nil {
			return KeyUsage{}, err
		}
		o.InFlight, o.Held, o.Queued, o.QueueMore, o.HeldFor = r.InFlight, lu.Held, lu.Queued, lu.QueueMore, lu.Earliest
	}
	return o, nil
}

// ruleOf returns what t, a Transport or a Limiter, shows and its rule
// named name.
func ruleOf(t any, name string) (inspect.View, inspect.Rule, error) {
	v, ok := inspect.Transport(t)
	if !ok {
		return v, inspect.Rule{}, errNoTransport
	}
	for _, r := range v.Rules {
		if r.Name == name {
			return v, r, nil
		}
	}
	return v, inspect.Rule{}, fmt.Errorf("%w: %q", ErrUnknownRule, name)
}

// storeKey is StoreKey once the rule is found.
func storeKey(v inspect.View, r inspect.Rule, rateKey string) (string, error) {
	if rateKey == "" {
		return "", &throttle.KeyError{Rule: r.Name, Reason: "empty rate key"}
	}
	if r.HashTag != "" {
		// The tag is the value of an Also key for each request.
		return "", &throttle.KeyError{Rule: r.Name, Reason: "the rule's keys start with the hash tag of its Also key " + r.HashTag + ", which only a request gives"}
	}
	return r.Scope + v.StoreKey(rateKey), nil
}

// KeyUsage is the state of one rate key at one moment, as Usage reads it:
// how much of each limit is used, when the next request could go, and what
// the upstream said.
type KeyUsage struct {
	// Algorithm is the rule's: how the limits count.
	Algorithm throttle.Algorithm
	// Limits has one entry per limit a request of the rule reserves, in
	// its order: the rule's, then its default pace, if any.
	Limits []LimitUsage
	// Next is how long from now until the earliest slot the limits and the
	// upstream allow a request of cost 1 (0: now). Nothing is reserved.
	// Reservations still waiting are counted in Reserved, not here.
	Next time.Duration
	// NextCause says what set Next; NextLimit is the index in Limits of
	// the limit that did, when NextCause is CauseLimit.
	NextCause Cause
	NextLimit int
	// Capped is set when the counting search ran out of steps: Next is
	// then only a lower bound.
	Capped bool
	// Entries is the number of entries in the key's log, those not trimmed
	// yet included (SlidingLog; 0 for the other algorithms). A Redis store
	// trims lazily and the memory store eagerly, so the two may differ
	// here, never in the fields above.
	Entries int
	// Last is the time of the log's newest entry minus now: positive while
	// a reservation still waits (SlidingLog, when Entries > 0).
	Last time.Duration
	// Pause is how long the upstream's pause still lasts (0: none).
	Pause time.Duration
	// Learned is a limit learned from the upstream's headers, its window
	// with the rule's Margin, still valid for LearnedFor (N 0: none).
	Learned    throttle.Limit
	LearnedFor time.Duration
	// LearnedPace is the pace the key moved to after a 429 that came
	// although the fleet kept its limits, still valid for LearnedPaceFor
	// (N 0: none): one request per Per, Burst more at once.
	LearnedPace    throttle.Limit
	LearnedPaceFor time.Duration
	// LearnedPaceChanged is how long ago the learned pace was last set,
	// slowed, or sped up by a probe after a quiet time; LearnedPaceProbed,
	// how long ago a probe last sped it up, when one did since it was set
	// (PaceProbed).
	LearnedPaceChanged, LearnedPaceProbed time.Duration
	PaceProbed                            bool
	// LearnedMargin is how much wider than the rule's Margin a refusal at a
	// window's edge made the key's window limits, for the whole fleet,
	// still valid for LearnedMarginFor, last widened or narrowed by a probe
	// LearnedMarginChanged ago (0s: none). Next includes it.
	LearnedMargin, LearnedMarginFor, LearnedMarginChanged time.Duration
	// Budget units are left until BudgetReset from now, as the upstream's
	// headers said (BudgetReset 0: no budget).
	Budget      int
	BudgetReset time.Duration
	// InFlight is the rule's cap on requests in flight (Rule.InFlight; 0:
	// none, and the fields below are 0). Held leases are held now, the
	// earliest of them until HeldFor from now unless renewed; Queued
	// requests wait in the key's queue for one (QueueMore: more than the
	// first 1,000 read).
	InFlight, Held, Queued int
	QueueMore              bool
	HeldFor                time.Duration
}

// LimitUsage is the state of one limit of a key.
type LimitUsage struct {
	// Limit is the limit as a request reserves it: a window includes the
	// rule's Margin.
	Limit throttle.Limit
	// Used is, for a window limit under SlidingLog, the units sent in the
	// last window; under FixedWindow and SlidingCounter, the units of the
	// window holding now; under Buckets, of the buckets of the last
	// window. For a paced limit, the part of its burst spent, out of
	// Burst+1 units that may go at once.
	Used int
	// Reserved is the units reserved for later: requests still waiting for
	// their slot.
	Reserved int
	// Previous is, under SlidingCounter, the units of the window before
	// now's, which its estimate weighs in (0 for the others).
	Previous int
}

// Cause is what set a key's next free slot (KeyUsage.NextCause).
type Cause int

const (
	// CauseNone: nothing holds a request back; Next is 0.
	CauseNone Cause = iota
	// CauseLimit: the limit Limits[NextLimit].
	CauseLimit
	// CauseUpstream: the upstream's pause, or its budget run out.
	CauseUpstream
	// CauseLearned: a limit or a pace learned from the upstream.
	CauseLearned
)

// usageOf is u as the operator's KeyUsage.
func usageOf(u contract.Usage) KeyUsage {
	o := KeyUsage{Algorithm: throttle.Algorithm(u.Algorithm), Next: u.Next, NextLimit: u.NextLimit, Capped: u.Capped,
		Entries: u.Entries, Last: u.Last, Pause: u.Pause, Learned: throttle.Limit(u.Learned), LearnedFor: u.LearnedFor,
		LearnedPace: throttle.Limit(u.LearnedPace), LearnedPaceFor: u.LearnedPaceFor, Budget: u.Budget, BudgetReset: u.BudgetReset,
		LearnedPaceChanged: u.LearnedPaceChanged, LearnedPaceProbed: u.LearnedPaceProbed, PaceProbed: u.PaceProbed,
		LearnedMargin: u.LearnedMargin, LearnedMarginFor: u.LearnedMarginFor, LearnedMarginChanged: u.LearnedMarginChanged}
	switch u.NextCause {
	case contract.CauseLimit:
		o.NextCause = CauseLimit
	case contract.CauseUpstream:
		o.NextCause = CauseUpstream
	case contract.CauseLearned:
		o.NextCause = CauseLearned
	}
	for _, l := range u.Limits {
		o.Limits = append(o.Limits, LimitUsage{Limit: throttle.Limit(l.Limit), Used: l.Used, Reserved: l.Reserved, Previous: l.Previous})
	}
	return o
}
