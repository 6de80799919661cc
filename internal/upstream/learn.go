package upstream

import (
	"math"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is what a response teaches about a rule's key: the pure part of
// listening, from what the response said (Said) to what the store keeps
// (contract.Learned).

// appUsageSlow is the usage percentage (X-App-Usage,
// X-Business-Use-Case-Usage) from which the key slows down: from its
// configured rate at appUsageSlow, in sends spread over the window, to
// appUsageFloor of that rate at 100%.
const appUsageSlow = 80.0

// appUsageFloor is the share of the configured rate a key keeps at 99%
// usage. A fleet alone at its full rate keeps the usage at 99–100%, and a
// percentage has a resolution of 1%: at 99% the window holds 99% of the
// limit or more, so 99% of the rate is the most that does not fill it with
// the key's own sends, and the pause at 100% (usagePause) stops what more
// there is. Less would only cut a fleet that fills the window alone.
const appUsageFloor = 0.99

// appUsageSpans is how many parts of the longest window the slowed key's
// sends are spread over, at most: a learned limit of a tenth of N per tenth
// of the window keeps the rate and stops a burst from filling the window.
// Each part holds at least appUsageUnits, so that rounding its N down
// costs no more than the floor does.
const (
	appUsageSpans = 10
	appUsageUnits = 20
)

// HeldFor is how long what a key learned of a limit of window per holds
// unless a response renews it (a learned limit, a learned pace, a learned
// margin): twice its window, at least 10 minutes, so that it is not
// relearned every few seconds, and at most a day.
func HeldFor(per time.Duration) time.Duration {
	return min(max(10*time.Minute, 2*per), 24*time.Hour)
}

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
		case sig.Refills:
			// A bucket refilled continuously: nothing left comes back
			// gradually, and the fleet's own log, never more permissive
			// than a bucket of its N, counts its sends. Only a refusal
			// pauses (below).
		case sig.Remaining == 0:
			l.Pause = sig.Reset
		case sig.Bucket != "":
			// A route bucket's window is held by what its first
			// response taught (below); a budget would count the
			// sends already placed under it twice.
		case !d.implied(sig.Remaining, sig.Reset):
			l.Remaining, l.Reset = sig.Remaining, sig.Reset
		}
	}

	// Every other dimension (a day, …) with nothing left pauses the key
	// until its own reset, and no other's; a bucket refilled continuously
	// (tokens) only when the upstream refuses (below).
	for _, b := range sig.Dims {
		if b.Remaining == 0 && !b.Refills {
			l.Pause = max(l.Pause, b.Reset)
		}
	}

	if sig.Refused {
		switch until := sig.Exhausted(); {
		case sig.HasRetryAfter:
			l.Pause = max(l.Pause, sig.retryAfter())
		case until > 0:
			// The budget that has nothing left: a 429 on tokens waits
			// for the tokens' reset, not the requests'.
			l.Pause = max(l.Pause, until)
		case sig.HasUsage && sig.Usage >= 100:
			// The usage says how full the window is: its pause (below)
			// rather than a whole window.
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
	// A route bucket seen at its first request (Discord): its limit and
	// window, learned at once for the whole fleet. No window of the
	// bucket's length then holds more than its limit, however the
	// bucket's windows are placed: as a learned limit, which the key's log
	// keeps over the bucket's window, when the log keeps that many entries
	// (the limit at most the rule's largest window N); else as a pace
	// without a burst, which pays the allowance on every send.
	if sig.Window > 0 && sig.Limit > 0 && !d.implied(sig.Limit, sig.Window) {
		if sig.Limit <= contract.MaxN(d.limits) {
			cand := contract.Limit{N: sig.Limit, Per: sig.Window + d.margin}
			if l.Limit.N == 0 || float64(cand.N)/float64(cand.Per) < float64(l.Limit.N)/float64(l.Limit.Per) {
				l.Limit = cand
			}
		} else {
			l.Pace = contract.Limit{N: sig.Limit, Per: sig.Window + d.margin, Paced: true}
			l.PaceTTL = HeldFor(l.Pace.Per)
		}
	}

	var usage contract.Limit
	if sig.HasUsage {
		switch {
		case sig.Usage >= 100:
			if !sig.regain() {
				l.Pause = max(l.Pause, usagePause(sig.Usage, longest.Per))
			}
		case sig.Usage >= appUsageSlow:
			usage = usageLimit(sig.Usage, longest)
			if usage.N > 0 && !d.implied(usage.N, usage.Per) && (l.Limit.N == 0 || float64(usage.N)/float64(usage.Per) < float64(l.Limit.N)/float64(l.Limit.Per)) {
				l.Limit = contract.Limit{N: usage.N, Per: usage.Per + d.margin}
			}
		}
	}
	switch {
	case usage.N > 0 && l.Limit.N == usage.N && l.Limit.Per == usage.Per+d.margin:
		// The responses say it again while the usage stays high, and it
		// lapses two windows after they last did: a fleet whose own log
		// holds a full window sends nothing for up to a window, and its
		// spread sends take up to another to bring the usage back over
		// appUsageSlow. Lapsing sooner (two parts), it let the fleet
		// send the window's burst again each time.
		l.LimitTTL = 2 * (longest.Per + d.margin)
	case l.Limit.N > 0:
		l.LimitTTL = HeldFor(l.Limit.Per)
	}
	l.Pause = capPause(l.Pause)
	return l
}

// retryAfter is the wait a refusal states: Retry-After, or the exact reset
// of the route bucket it exhausted (Discord's X-RateLimit-Reset-After, in
// seconds with a fraction) when Retry-After is only that reset rounded up to
// the whole second. Paused a second too long, the requests already placed
// in the bucket's next window would take new slots, a window later.
func (s *Said) retryAfter() time.Duration {
	ceil := (s.Reset + time.Second - 1).Truncate(time.Second)
	if s.Bucket != "" && !s.Global && s.HasBudget && s.Remaining == 0 && s.Reset > 0 &&
		s.RetryAfter > s.Reset && s.RetryAfter <= max(time.Second, ceil) {
		return s.Reset
	}
	return s.RetryAfter
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

// usagePause is how long a key pauses at a usage of pct (at least 100%)
// of its longest window w when the API states no time to regain access:
// each percent over 99 is a hundredth of the window's sends, which leave
// it in about a hundredth of the window (at 100%, 36 seconds of an hour).
func usagePause(pct float64, w time.Duration) time.Duration {
	return capPause(time.Duration(math.Floor(min(pct, 1000)-99) * float64(w) / 100))
}

// usageLimit returns the limit a key keeps at a usage of pct (from
// appUsageSlow to 100%) of its longest limit: its N and window cut in
// appUsageSpans parts, the rate from all of it at appUsageSlow to
// appUsageFloor of it at 99% and over. The share lengthens each part
// rather than rounding its N down, which would cost up to a unit in
// appUsageUnits (5%) whatever the usage. Zero for a limit below
// 2 × appUsageUnits, too small to cut: the pause at 100% alone holds it.
func usageLimit(pct float64, longest contract.Limit) contract.Limit {
	spans := min(appUsageSpans, longest.N/appUsageUnits)
	if spans < 2 {
		return contract.Limit{}
	}
	share := 1 - (1-appUsageFloor)*(min(pct, 99)-appUsageSlow)/(99-appUsageSlow)
	n := longest.N / spans
	// n of longest.N over as much of its window, lengthened by the
	// share; rounded up to a millisecond.
	ms := math.Ceil(float64(longest.Per) * float64(n) / float64(longest.N) / share / float64(time.Millisecond))
	return contract.Limit{N: n, Per: time.Duration(ms) * time.Millisecond}
}

// regain reports whether the response stated a time to regain access
// (Meta's estimated_time_to_regain_access): a pause the API sets itself.
func (s *Said) regain() bool {
	for _, b := range s.Dims {
		if b.Name == "business-use-case" && b.Reset > 0 {
			return true
		}
	}
	return false
}
