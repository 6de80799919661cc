package contract

import (
	"context"
	"time"
)

// Overrides is the part of a store that keeps the limits an operator sets
// at runtime for a rule, fleet-wide, and their history: one record per rule
// name, opaque to the store, that expires with its TTL or when cleared.
// Plain commands, no script: the processes poll it (see throttle's
// override.go), in the reservation's round trip (OverridesRider) but not
// in its script.
type Overrides interface {
	// SetOverride records doc as the override of rule for ttl (0: until
	// cleared), replacing any, and adds entry to the rule's history, in
	// one atomic step. doc and entry are at most MaxOverrideDoc bytes.
	SetOverride(ctx context.Context, rule string, doc []byte, ttl time.Duration, entry []byte) error
	// ClearOverride removes the override of rule, if any, and adds entry
	// to its history, in one atomic step.
	ClearOverride(ctx context.Context, rule string, entry []byte) error
	// Overrides returns the override of each of rules that has one, in
	// one round trip (one per Cluster node).
	Overrides(ctx context.Context, rules []string) (map[string][]byte, error)
	// OverrideHistory returns the history of rule, newest first: at most
	// MaxOverrideHistory entries.
	OverrideHistory(ctx context.Context, rule string) ([][]byte, error)
}

// OverridesRider is a store that can read overrides in the round trip of
// its next reservation rather than in one of their own: a process polls
// them once a second, which at a few requests a second would add a call to
// the store for every few requests.
type OverridesRider interface {
	// RideOverrides asks that the overrides of rules be read (as
	// Overrides reads them) with the next Reserve call that reaches the
	// store, and done be called with them, or with the error that call
	// met, once, never from within RideOverrides, and without holding up
	// the reservation. It reports false, and keeps nothing, when this
	// store cannot: then the caller reads them itself.
	RideOverrides(rules []string, done func(map[string][]byte, error)) bool
}

// MaxOverrideDoc bounds an override's record and a history entry.
const MaxOverrideDoc = 4 << 10

// MaxOverrideHistory is how many entries of a rule's history a store keeps.
const MaxOverrideHistory = 100
