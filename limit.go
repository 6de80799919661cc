package throttle

import (
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// Limit allows at most N units in any interval of length Per: a sliding
// window, not a fixed one. PerHour(5000) allows 5000 calls in every hour-long
// interval, wherever it starts. A paced limit (Paced) spaces the units
// instead. Build one with Per, PerSecond, PerMinute, PerHour, PerDay or
// Paced.
type Limit struct {
	N   int
	Per time.Duration
	// Precision is the bucket length of the Buckets algorithm (zero: Per);
	// the other algorithms refuse one.
	Precision time.Duration
	// Paced sends one unit every Per/N, with Burst units of tolerance
	// after an idle spell (see Paced).
	Paced bool
	Burst int
	// SlowStart makes a paced limit earn its burst instead of starting
	// with it (docs/pacing.md).
	SlowStart bool
	// Unit is what the limit counts: empty for the rule's requests (each
	// costs Rule.Cost), or a name such as "tokens", whose cost per request
	// Rule.Costs gives (see Of and docs/costs.md).
	Unit string
}

// Of returns l counting unit instead of requests:
// PerMinute(40_000).Of("tokens") allows 40,000 tokens a minute, each
// request costing what Rule.Costs["tokens"] estimates, settled to what the
// response says when the rule has an Actual. A unit's limits keep one
// entry per request, whatever their N.
func (l Limit) Of(unit string) Limit {
	l.Unit = unit
	return l
}

// String renders l as "5000/1h0m0s", "5000/1h0m0s/1m0s" with a Precision,
// "100/1s paced" or "100/1s paced+10" with a burst, "40000/1m0s tokens"
// with a unit.
func (l Limit) String() string { return contract.Limit(l).String() }

// Algorithm is how a rule counts its units (Rule.Algorithm). Only
// SlidingLog is exact; the others keep counters instead of one entry per
// unit, so their memory does not grow with N, and pay for it in accuracy at
// window edges (the README gives the figures).
type Algorithm uint8

// The algorithms a Rule may choose.
const (
	SlidingLog     Algorithm = Algorithm(contract.SlidingLog)     // exact: every unit's send time; the default
	FixedWindow    Algorithm = Algorithm(contract.FixedWindow)    // one counter per aligned window: up to 2N across a boundary
	SlidingCounter Algorithm = Algorithm(contract.SlidingCounter) // the previous window weighted in
	Buckets        Algorithm = Algorithm(contract.Buckets)        // buckets of Limit.Precision, at most 4096 per window
)

// String returns a's short name: "log", "fixed", "counter" or "buckets".
func (a Algorithm) String() string { return contract.Algorithm(a).String() }

// limits is ls as the store takes them.
func limits(ls []Limit) []contract.Limit {
	if ls == nil {
		return nil
	}
	out := make([]contract.Limit, len(ls))
	for i, l := range ls {
		out[i] = contract.Limit(l)
	}
	return out
}

// PerSecond returns a limit of n per rolling second.
func PerSecond(n int) Limit { return Limit{N: n, Per: time.Second} }

// PerMinute returns a limit of n per rolling minute.
func PerMinute(n int) Limit { return Limit{N: n, Per: time.Minute} }

// PerHour returns a limit of n per rolling hour.
func PerHour(n int) Limit { return Limit{N: n, Per: time.Hour} }

// PerDay returns a limit of n per rolling day.
func PerDay(n int) Limit { return Limit{N: n, Per: 24 * time.Hour} }

// Per returns a limit of n per rolling window of length d.
func Per(n int, d time.Duration) Limit { return Limit{N: n, Per: d} }

// Paced returns a limit of n per d sent evenly, one every d/n, with up to
// burst more at once after an idle spell (0 <= burst <= n; burst 0: evenly
// spaced): a GCRA, as token buckets and strict-spacing upstreams count.
// Paced(100, time.Second, 0) sends one every 10ms. The rule's Margin
// lengthens d, once per window: the spacing is (d + Margin)/n. A rule may
// hold one paced limit beside window limits, under SlidingLog only, and a
// cost of at most burst+1. See docs/pacing.md.
func Paced(n int, d time.Duration, burst int) Limit {
	return Limit{N: n, Per: d, Paced: true, Burst: burst}
}
