package contract

import (
	"context"
	"time"
)

// Usage is what a key's state says at one moment: how much of each limit is
// used, when the next request could go, and what the upstream said. The
// Redis store reads it in one read-only script call, the Memory store under
// its lock; both give the same answers, but for Entries.
type Usage struct {
	// Algorithm is the one the key was inspected under.
	Algorithm Algorithm
	// Limits has one entry per limit of the request, in its order.
	Limits []LimitUsage
	// Next is how long from now until the earliest slot the limits and the
	// upstream's feedback allow a request of cost 1 (0: now). Nothing is
	// reserved. The order of the log (a reservation without an allowance
	// never goes before the newest entry, see Last) is left out: Reserved
	// counts the reservations still waiting.
	Next time.Duration
	// NextCause is what set Next: CauseNone (free now), CauseLimit
	// (Limits[NextLimit]), CauseUpstream or CauseLearned.
	NextCause Cause
	NextLimit int
	// Capped is set when the counting search ran out of steps: Next is then
	// only a lower bound.
	Capped bool
	// Entries is the number of entries in the log, those not trimmed yet
	// included (SlidingLog; 0 for the counting algorithms). The Memory store
	// trims eagerly and the script lazily, so the two may differ here, as
	// in memory, never in the answers above.
	Entries int
	// Last is the time of the log's newest entry minus now: positive while
	// a reservation still waits (SlidingLog, when Entries > 0).
	Last time.Duration
	// Pause is how long the upstream's pause still lasts (0: none).
	Pause time.Duration
	// Learned is a limit learned from the upstream's headers, still valid
	// for LearnedFor (N 0: none).
	Learned    Limit
	LearnedFor time.Duration
	// LearnedPace is the pace the key moved to after a 429 despite
	// compliance, still valid for LearnedPaceFor (N 0: none): 1 unit per
	// Per, Burst more at once. SlidingLog reservations keep it beside a
	// paced limit of their own, the stricter of the two.
	LearnedPace    Limit
	LearnedPaceFor time.Duration
	// LearnedPaceChanged is how long ago the learned pace was last set,
	// slowed or sped up by a probe; LearnedPaceProbed, how long ago a
	// probe last sped it up, when one did since it was set (PaceProbed).
	LearnedPaceChanged, LearnedPaceProbed time.Duration
	PaceProbed                            bool
	// LearnedMargin is how much wider than the request's own a refusal at
	// a window's edge made the key's window limits (SlidingLog), still
	// valid for LearnedMarginFor, last widened or narrowed by a probe
	// LearnedMarginChanged ago (0s: none). Next includes it.
	LearnedMargin, LearnedMarginFor, LearnedMarginChanged time.Duration
	// Budget units are left until BudgetReset from now (BudgetReset 0: no
	// budget).
	Budget      int
	BudgetReset time.Duration
}

// LimitUsage is the state of one limit of a key.
type LimitUsage struct {
	Limit Limit
	// Used is, for SlidingLog, the units recorded in (now - Per, now]; for
	// FixedWindow and SlidingCounter, the units of the window holding now;
	// for Buckets, of the ceil(Per/Precision) buckets ending with now's.
	Used int
	// Reserved is the units recorded after now (SlidingLog) or counted in
	// later windows or buckets: reservations still waiting for their slot.
	Reserved int
	// Previous is, for SlidingCounter, the units of the window before
	// now's, which its estimate weighs in (0 for the others).
	Previous int
}

// Inspector is the part of a store that reports a key's usage without
// changing it (Caps.Usage): Redis and Memory.
type Inspector interface {
	// Usage reports the state of key under req's Limits and Algorithm (the
	// same as its reservations use). The other fields of req are ignored.
	// It changes nothing: no trim, no TTL, no counter.
	Usage(ctx context.Context, key string, req Request) (Usage, error)
}

// UsageRequest is req as Usage reads it: cost 1, no allowance, and a wait
// beyond any pause (usageServerWait), so that nothing refuses.
func UsageRequest(key string, req Request) (Request, error) {
	u := Request{Limits: req.Limits, Cost: 1, Algorithm: req.Algorithm, MaxWait: time.Duration(UsageServerWait) * time.Microsecond}
	return u, u.Validate(key)
}

// UsageServerWait stands for "any pause": hold never refuses within it.
const UsageServerWait = int64(4 * MaxFeedback / time.Microsecond)

// PaceUsage is the LimitUsage of a paced limit l whose key holds the pace
// time tat at now (0: none); see LimitUsage.
func PaceUsage(l Limit, tat, now int64) LimitUsage {
	t, b := l.Interval(), int64(l.Burst)
	k := int64(0)
	switch {
	case tat > now:
		k = (tat - now + t - 1) / t
	case tat == 0 && l.SlowStart:
		k = b
	}
	used := min(k, b+1)
	return LimitUsage{Limit: l, Used: int(used), Reserved: int(k - used)}
}

// LearnedPace is a learned pace of spacing t µs and burst b as a Limit.
func LearnedPace(t, b int64) Limit {
	return Limit{N: 1, Per: FromMicros(t), Paced: true, Burst: int(b)}
}
