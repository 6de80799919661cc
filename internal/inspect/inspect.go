// Package inspect is the seam between throttle and its operator package:
// what an operator's tool reads of a Transport (its rules, how it stores a
// rate key, its store) and how a credential becomes a rate key, without
// throttle exporting a name for it. The throttle package sets Transport and
// CredentialKey in an init (its file inspect.go); the operator package calls
// them.
package inspect

import "github.com/throttle-go/throttle/internal/contract"

// Rule is what an operator's tool needs of one rule of a Transport.
type Rule struct {
	Name string
	// Scope starts the store keys of the rule's own logs.
	Scope string
	// Limits are those a request of the rule reserves: its own, each
	// window with the rule's Margin added, then its default pace, if any.
	Limits    []contract.Limit
	Algorithm contract.Algorithm
	// HashTag names the Also key whose value, taken from each request,
	// starts every key of the rule; empty when there is none.
	HashTag string
	// InFlight is the rule's cap on requests in flight (0: none).
	InFlight int
}

// View is what an operator's tool sees of a Transport.
type View struct {
	// Rules are the Transport's rules in the order of its options, the
	// default rule last.
	Rules []Rule
	// StoreKey returns rateKey as the Transport stores it, after a rule's
	// Scope: HMAC'd with its key secret, else hashed when long.
	StoreKey func(rateKey string) string
	// Store is the Transport's store.
	Store contract.Store
}

// Transport returns the View of t, a *throttle.Transport or a
// *throttle.Limiter (its one rule), and false when t is not one made by
// throttle.New or NewLimiter. It is set by the throttle package.
var Transport func(t any) (View, bool)

// CredentialKey returns the rate key that throttle's built-in KeyFuncs
// derive from a request carrying credential (see operator.CredentialKey).
// It is set by the throttle package.
var CredentialKey func(by, credential string) (string, error)
