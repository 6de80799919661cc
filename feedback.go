package throttle

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is the transport's ear: after each response it reads what the
// upstream said (a 429, a 503 with Retry-After, rate-limit headers) and tells
// the store, which shares it with the whole fleet (contract.Feedback).

// appUsagePause is how long a key pauses when Meta's X-App-Usage reports 100%
// or more: Meta throttles over a rolling hour and "it can take up to an
// hour" to be let in again, so the fleet sends one probe every appUsagePause
// rather than a request per worker.
const appUsagePause = 5 * time.Minute

// appUsageSlow is the X-App-Usage percentage from which the key slows down:
// from full speed at appUsageSlow to nothing at 100%.
const appUsageSlow = 80.0

// Feedback reports what the upstream said about a key, to WithOnFeedback. It
// never holds a secret: Key is the (hashed) rate key.
type Feedback struct {
	Rule string
	Key  string
	// Status is the response's status code (0 for Limiter.Pause).
	Status int
	// Throttled is set for a 429, and for a 503 with Retry-After.
	Throttled bool
	// Pause is how long the key was paused for the whole fleet (zero if not).
	Pause time.Duration
	// Limit is the limit learned from the headers (its window includes the
	// rule's Margin), zero if none was learned.
	Limit Limit
	// Paced is the paced limit the key moved to, fleet-wide, after a 429
	// although the throttle kept the rule's limits (its window includes
	// the rule's Margin), zero if none: see docs/feedback.md.
	Paced Limit
	// Remaining units until Reset: a budget learned from the headers, when
	// Reset is positive.
	Remaining int
	Reset     time.Duration
	// Err is the store's error if recording the feedback failed; the response
	// is returned to the caller regardless.
	Err error
}

// feedbackState is the transport's side of the feedback: what it last told
// the store per key, so that a header repeated on every response does not
// cost a store call on every response. (The counters are per rule, in
// metrics.go.)
type feedbackState struct {
	mu   sync.Mutex
	told map[string]told
}

type told struct {
	limit  contract.Limit
	at     time.Time // when the limit was last recorded
	reset  int64     // the budget's reset last recorded, in Unix seconds
	shaped time.Time // when the key last moved to a learned pace (shape.go)
	slowed int       // how often its pace was slowed since that pace began
}

// maxTold bounds the keys remembered; past it the memory starts afresh (which
// costs at most one extra store call per key).
const maxTold = 10_000

// throttledStatus reports whether a response is the upstream saying "slow
// down": a 429, or a 503 with Retry-After.
func throttledStatus(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
}

// heard is what listen made of a response: the pause it asks for (zero if
// none), and whether a store now holds it for the whole fleet.
type heard struct {
	pause time.Duration
	held  bool
}

// listen reads resp, sent under rule r for k, records what it says through
// the store failure policy, and reports it. complied says the throttle
// admitted the send (not a failed-open store), due when its slot was due
// (zero if not measured).
func (t *Transport) listen(ctx context.Context, r *rule, k keyed, resp *http.Response, complied bool, due time.Time) heard {
	throttled := r.stats.count(resp)
	now := t.now()
	sig := parseSignals(resp.Header, now)
	l := r.learn(sig, throttled)
	if r.IgnoreUpstream {
		if throttled {
			t.report(ctx, Feedback{Rule: r.Name, Key: k.key, Status: resp.StatusCode, Throttled: true})
		}
		// Not recorded, but a retry still waits for it.
		return heard{pause: l.Pause}
	}
	move := false
	if complied && resp.StatusCode == http.StatusTooManyRequests {
		move = t.fb.reshape(r, k.skey, sig, due, now, &l) // shape.go
	}
	if !throttled && l.Pause == 0 && !t.fb.news(k.skey, l, now) {
		return heard{}
	}
	fb := Feedback{Rule: r.Name, Key: k.key, Status: resp.StatusCode, Throttled: throttled,
		Pause: l.Pause, Limit: Limit(l.Limit), Paced: Limit(l.Pace), Remaining: l.Remaining, Reset: l.Reset}
	h := heard{pause: l.Pause}
	if l.Pause > 0 || l.Limit.N > 0 || l.Reset > 0 || l.Pace.N > 0 {
		recorded, err := t.eng.Learn(ctx, k.skey, l, move && l.Pace.N > 0) // internal/engine: recorded, and heard by the waiters
		fb.Err = r.storeErr(err)
		if recorded {
			if l.Pause > 0 {
				r.stats.pauses.Add(1)
				h.held = true
			}
			if l.Limit.N > 0 || l.Reset > 0 {
				r.stats.tightenings.Add(1)
			}
			if l.Pace.N > 0 {
				r.stats.reshapes.Add(1)
			}
		}
	}
	t.report(ctx, fb)
	return h
}

// news reports whether l tells the store anything it was not told lately by
// this transport: a limit not recorded in the last quarter of its TTL, or a
// budget for a window (a reset) not recorded yet. It remembers l.
func (f *feedbackState) news(skey string, l contract.Learned, now time.Time) bool {
	if l.Limit.N == 0 && l.Reset == 0 {
		return false
	}
	reset := now.Add(l.Reset).Unix()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.told == nil || len(f.told) >= maxTold {
		f.told = make(map[string]told)
	}
	old, seen := f.told[skey]
	fresh := !seen ||
		l.Limit.N > 0 && (l.Limit != old.limit || now.Sub(old.at) > l.LimitTTL/4) ||
		l.Reset > 0 && reset != old.reset
	if fresh {
		if l.Limit.N > 0 {
			old.limit, old.at = l.Limit, now
		}
		if l.Reset > 0 {
			old.reset = reset
		}
		f.told[skey] = old
	}
	return fresh
}

// learn turns what a response said into what the store keeps for the rule's
// key: never a limit the rule's own limits already imply, never a wait
// beyond maxServerPause.
func (r *rule) learn(sig signals, throttled bool) contract.Learned {
	var l contract.Learned
	longest := r.Limits[0]
	shortest := r.Limits[0].Per
	for _, lim := range r.Limits[1:] {
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
	if sig.hasBudget && sig.reset > contract.ResetSlack {
		switch {
		case sig.remaining == 0:
			l.Pause = sig.reset
		case !r.implied(sig.remaining, sig.reset):
			l.Remaining, l.Reset = sig.remaining, sig.reset
		}
	}

	if throttled {
		switch {
		case sig.hasRetryAfter:
			l.Pause = max(l.Pause, sig.retryAfter)
		case sig.hasBudget && sig.remaining == 0 && sig.reset > 0:
			l.Pause = max(l.Pause, sig.reset)
		default:
			// A 429 without a wait: the upstream's window is full. One
			// window of the rule's tightest limit from now, every request
			// it counted in a window that long has left it.
			l.Pause = max(l.Pause, shortest+r.Margin)
		}
	}

	// A learned limit, the tightest rate of: each RateLimit-Policy (q per
	// w), X-RateLimit-Limit over the rule's longest window (it names no
	// window of its own) when limitIsWindow, and a share of the longest
	// limit from a high X-App-Usage. Only limits over windows the log
	// covers (at most the longest), and not already implied by the rule's
	// own.
	consider := func(n int, w time.Duration) {
		if n < 1 || w > longest.Per || r.implied(n, w) {
			return
		}
		cand := Limit{N: n, Per: w + r.Margin}
		if l.Limit.N == 0 || float64(cand.N)/float64(cand.Per) < float64(l.Limit.N)/float64(l.Limit.Per) {
			l.Limit = contract.Limit(cand)
		}
	}
	for _, p := range sig.policies {
		consider(p.q, p.w)
	}
	if limitIsWindow(sig.limit, longest) {
		consider(sig.limit, longest.Per)
	}
	if sig.hasUsage {
		switch {
		case sig.usage >= 100:
			l.Pause = max(l.Pause, appUsagePause)
		case sig.usage >= appUsageSlow:
			consider(max(1, int(float64(longest.N)*(100-sig.usage)/(100-appUsageSlow))), longest.Per)
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
func limitIsWindow(n int, longest Limit) bool {
	return n > 0 && 2*n >= longest.N
}

// implied reports whether the rule's own limits already allow no more than n
// units in any interval of length w: some limit has N <= n over a window at
// least w long.
func (r *rule) implied(n int, w time.Duration) bool {
	for _, lim := range r.Limits {
		// A paced limit's burst lets N + Burst into a window.
		if lim.N+lim.Burst <= n && lim.Per >= w {
			return true
		}
	}
	return false
}

// report sends fb to the hook and the logger.
func (c *core) report(ctx context.Context, fb Feedback) {
	if c.onFeedback != nil {
		c.onFeedback(fb)
	}
	if c.logger == nil {
		return
	}
	level, kind := slog.LevelDebug, noFeedback
	switch {
	case fb.Err != nil:
		level, kind = slog.LevelWarn, feedbackFailed
	case fb.Throttled || fb.Pause > 0:
		level, kind = slog.LevelInfo, throttledAnswer
	}
	if !c.logger.Enabled(ctx, level) ||
		kind != noFeedback && !c.logFull(ctx, level, logKind{rule: fb.Rule, feedback: kind}) {
		return
	}
	attrs := []slog.Attr{
		slog.String("rule", fb.Rule),
		slog.String("key", fb.Key),
		slog.Int("status", fb.Status),
	}
	if fb.Pause > 0 {
		attrs = append(attrs, slog.Duration("pause", fb.Pause))
	}
	if fb.Limit.N > 0 {
		attrs = append(attrs, slog.String("learned_limit", fb.Limit.String()))
	}
	if fb.Paced.N > 0 {
		attrs = append(attrs, slog.String("learned_pace", fb.Paced.String()))
	}
	if fb.Reset > 0 {
		attrs = append(attrs, slog.Int("remaining", fb.Remaining), slog.Duration("reset", fb.Reset))
	}
	if fb.Err != nil {
		attrs = append(attrs, slog.String("error", fb.Err.Error()))
	}
	c.logger.LogAttrs(ctx, level, "throttle feedback", attrs...)
}
