package upstream

import (
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is what a response teaches about a rule's key: the pure part of
// listening, from what the response said (Said) to what the store keeps
// (contract.Learned).

// appUsagePause is how long a key pauses when Meta's X-App-Usage reports 100%
// or more: Meta throttles over a rolling hour and "it can take up to an
// hour" to be let in again, so the fleet sends one probe every appUsagePause
// rather than a request per worker.
const appUsagePause = 5 * time.Minute

// appUsageSlow is the X-App-Usage percentage from which the key slows down:
// from full speed at appUsageSlow to nothing at 100%.
const appUsageSlow = 80.0

// Dialect reads the responses of one rule and turns what they say into what
// its key learns. It is built once per rule and read-only after: safe for
// concurrent use.
type Dialect struct {
	limits []contract.Limit // the rule's limits, windows without the margin
	margin time.Duration
	// refusals describe responses beyond a 429 and a 503 with
	// Retry-After that are refusals; notRefusals, those that are not.
	refusals, notRefusals []Match
}

// New returns the Dialect of a rule whose limits are limits (at least one;
// windows without the margin, a default pace included), whose margin is
// margin, and whose refusals (checked: Match.Check) are refusals and
// notRefusals.
func New(limits []contract.Limit, margin time.Duration, refusals, notRefusals []Match) *Dialect {
	return &Dialect{limits: limits, margin: margin, refusals: refusals, notRefusals: notRefusals}
}

// Learn turns what a response said into what the store keeps for the rule's
// key: never a limit the rule's own limits already imply, never a wait
// beyond MaxPause.
func (d *Dialect) Learn(sig Said) contract.Learned {
	var l contract.Learned
	longest := d.limits[0]
	shortest := d.limits[0].Per
	for _, lim := range d.limits[1:] {
		if lim.Per > longest.Per {
			longest = lim
		}
		shortest = min(shortest, lim.Per)
	}

	// A budget: remaining 0 is a pause until the reset. Resets come in
	// whole seconds, and an epoch reset is read against a Date truncated
	// to the second, so a reset may be up to 2s late: one of ResetSlack
	// (2s) or less is below the headers' resolution (it would double the
	// wait of a one-second window) and is left to Retry-After and the
	// learned limit.
	if sig.HasBudget && sig.Reset > contract.ResetSlack {
		switch {
		case sig.Remaining == 0:
			l.Pause = sig.Reset
		case !d.implied(sig.Remaining, sig.Reset):
			l.Remaining, l.Reset = sig.Remaining, sig.Reset
		}
	}

	// Every other dimension (tokens, a day, …) with nothing left pauses
	// the key until its own reset, and no other's.
	for _, b := range sig.Dims {
		if b.Remaining == 0 {
			l.Pause = max(l.Pause, b.Reset)
		}
	}

	if sig.Refused {
		switch until := sig.Exhausted(); {
		case sig.HasRetryAfter:
			l.Pause = max(l.Pause, sig.RetryAfter)
		case until > 0:
			// The budget that has nothing left: a 429 on tokens waits
			// for the tokens' reset, not the requests'.
			l.Pause = max(l.Pause, until)
		default:
			// A 429 without a wait: the upstream's window is full. One
			// window of the rule's tightest limit from now, every request
			// it counted in a window that long has left it.
			l.Pause = max(l.Pause, shortest+d.margin)
		}
	}

	// A learned limit, the tightest rate of: each RateLimit-Policy (q per
	// w), X-RateLimit-Limit over the rule's longest window (it names no
	// window of its own) when limitIsWindow, and a share of the longest
	// limit from a high X-App-Usage. Only limits over windows the log
	// covers (at most the longest), and not already implied by the rule's
	// own.
	consider := func(n int, w time.Duration) {
		if n < 1 || w > longest.Per || d.implied(n, w) {
			return
		}
		cand := contract.Limit{N: n, Per: w + d.margin}
		if l.Limit.N == 0 || float64(cand.N)/float64(cand.Per) < float64(l.Limit.N)/float64(l.Limit.Per) {
			l.Limit = cand
		}
	}
	for _, p := range sig.Policies {
		consider(p.Q, p.W)
	}
	if limitIsWindow(sig.Limit, longest) {
		consider(sig.Limit, longest.Per)
	}
	if sig.HasUsage {
		switch {
		case sig.Usage >= 100:
			l.Pause = max(l.Pause, appUsagePause)
		case sig.Usage >= appUsageSlow:
			consider(max(1, int(float64(longest.N)*(100-sig.Usage)/(100-appUsageSlow))), longest.Per)
		}
	}
	if l.Limit.N > 0 {
		l.LimitTTL = min(max(10*time.Minute, 2*l.Limit.Per), 24*time.Hour)
	}
	l.Pause = capPause(l.Pause)
	return l
}

// limitIsWindow reports whether X-RateLimit-Limit n may be read as a limit
// over the rule's longest window, whose limit is longest. The field names no
// window, and a GCRA or token bucket sends its burst there, not a rate:
// throttled/throttled sends MaxBurst + 1, so strict spacing at 100 per
// second says "1", which read over a window of a second would hold the
// fleet to 1 per second. A learned limit must not drive the fleet far below
// its configured rate, so a value below half the longest limit's N is read
// as a burst size and learned as nothing (a 429 still pauses the key). A
// value from half of N is read as the upstream's limit per window: a rule
// configured somewhat above its upstream's real limit.
func limitIsWindow(n int, longest contract.Limit) bool {
	return n > 0 && 2*n >= longest.N
}

// implied reports whether the rule's own limits already allow no more than n
// units in any interval of length w: some limit has N <= n over a window at
// least w long.
func (d *Dialect) implied(n int, w time.Duration) bool {
	for _, lim := range d.limits {
		// A paced limit's burst lets N + Burst into a window.
		if lim.N+lim.Burst <= n && lim.Per >= w {
			return true
		}
	}
	return false
}
