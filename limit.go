package throttle

import (
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// Limit allows at most N units in any interval of length Per: a sliding
// window, not a fixed one. PerHour(5000) allows 5000 calls in every hour-long
// interval, wherever it starts. A paced limit (Paced) spaces the units
// instead.
type Limit = contract.Limit

// Algorithm is how a rule counts its units; see contract.Algorithm.
type Algorithm = contract.Algorithm

// The algorithms a Rule may choose.
const (
	SlidingLog     = contract.SlidingLog     // exact; the default
	FixedWindow    = contract.FixedWindow    // one counter per aligned window
	SlidingCounter = contract.SlidingCounter // previous window weighted in
	Buckets        = contract.Buckets        // buckets of Limit.Precision
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
