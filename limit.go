package throttle

import (
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// Limit allows at most N units in any interval of length Per: a sliding
// window, not a fixed one. PerHour(5000) allows 5000 calls in every hour-long
// interval, wherever it starts. A paced limit (Paced) spaces the units
// instead. Build one with Per, PerSecond, PerMinute, PerHour, PerDay or
// Paced. Its fields:
//
//   - N int, Per time.Duration: at most N units in any interval of length Per.
//   - Precision time.Duration: the bucket length of the Buckets algorithm
//     (zero: Per); the other algorithms refuse one.
//   - Paced bool, Burst int: one unit every Per/N, with Burst units of
//     tolerance after an idle spell (see Paced).
//   - SlowStart bool: a paced limit earns its burst instead of starting
//     with it (docs/pacing.md).
//
// String renders it as "5000/1h0m0s", "100/1s paced+10" and the like.
type Limit = contract.Limit

// Algorithm is how a rule counts its units (Rule.Algorithm). Only
// SlidingLog is exact; the others keep counters instead of one entry per
// unit, so their memory does not grow with N, and pay for it in accuracy at
// window edges (the README gives the figures). String returns its short
// name: "log", "fixed", "counter" or "buckets".
type Algorithm = contract.Algorithm

// The algorithms a Rule may choose.
const (
	SlidingLog     = contract.SlidingLog     // exact: every unit's send time; the default
	FixedWindow    = contract.FixedWindow    // one counter per aligned window: up to 2N across a boundary
	SlidingCounter = contract.SlidingCounter // the previous window weighted in
	Buckets        = contract.Buckets        // buckets of Limit.Precision, at most 4096 per window
)

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
