package throttle

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/internal/upstream"
)

// This file is the transport's ear: after each response it reads what the
// upstream said (a 429, a 503 with Retry-After, rate-limit headers) and tells
// the store, which shares it with the whole fleet (contract.Feedback).

// maxServerPause caps every wait the upstream imposes (Retry-After, a
// reset, a pause for X-App-Usage): internal/upstream's MaxPause.
const maxServerPause = upstream.MaxPause

// Feedback reports what the upstream said about a key, to WithOnFeedback. It
// never holds a secret: Key is the (hashed) rate key.
type Feedback struct {
	Rule string
	Key  string
	// Status is the response's status code (0 for Limiter.Pause).
	Status int
	// Throttled is set for a refusal: a 429, a 503 with Retry-After, or a
	// response the rule's Refused describes (not one its NotRefused does).
	Throttled bool
	// Pause is how long the key was paused for the whole fleet (zero if not).
	Pause time.Duration
	// Limit is the limit learned from the headers (its window includes the
	// rule's Margin), zero if none was learned.
	Limit Limit
	// Paced is the paced limit the key moved to, fleet-wide, after a 429
	// although the throttle kept the rule's limits, or that a route
	// bucket's headers stated (its window includes the rule's Margin),
	// zero if none: see docs/feedback.md.
	Paced Limit
	// Margin is how much wider than the rule's Margin the key's windows
	// are now, fleet-wide, when this response changed that: a refusal at a
	// window's edge widened them, or a probe after a quiet time narrowed
	// them (Eased set; zero when it dropped the learned margin). See
	// docs/feedback.md.
	Margin time.Duration
	// Eased is set when, after a quiet time without refusals, a probe
	// moved the key back: its learned pace sped up towards the pace that
	// refusals slowed (Paced is the pace now), or its learned margin
	// narrowed (Paced zero; Margin is what is left). Each probe reports once.
	Eased bool
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
	mu    sync.Mutex
	told  map[string]told
	paths map[string]*pathSpread // per rule name (margin.go)
}

type told struct {
	limit   contract.Limit
	at      time.Time      // when the limit was last recorded
	reset   int64          // the budget's reset last recorded, in Unix seconds
	pace    contract.Limit // a pace the headers stated, last recorded at pacedAt
	pacedAt time.Time
	shaped  time.Time // when the key last moved to a learned pace (shape.go)
	slowed  int       // how often its pace was slowed since that pace began
	// short is when a refusal's rounded wait was last shortened to a few
	// spacings, shortFor that wait (shape.go).
	short    time.Time
	shortFor time.Duration
	// level is nonzero while this transport's slowing of the pace stands
	// (until its probes bring it back), base the pace it slowed (the rule's
	// shape, or a slower one that held: a route bucket's), set the window
	// of the pace it last set (less what its probes took off since); probed
	// when it last probed it (shape.go).
	level  int
	base   Limit
	set    time.Duration
	probed time.Time
	// widened is when this transport last widened the key's margin, and
	// marginProbed when it last probed it, with marginProbes left (margin.go).
	widened, marginProbed time.Time
	marginProbes          int
}

// maxTold bounds the keys remembered; past it the memory starts afresh (which
// costs at most one extra store call per key).
const maxTold = 10_000

// throttledStatus reports whether a response to a request no rule matched
// is the upstream saying "slow down": a 429, or a 503 with Retry-After.
func throttledStatus(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
}

// heard is what listen made of a response: whether it is a refusal, the
// pause it asks for (zero if none), and whether a store now holds it for
// the whole fleet.
type heard struct {
	refused bool
	pause   time.Duration
	held    bool
}

// sending is how a response's request was sent (transport.go): complied,
// the throttle admitted it (not a failed-open store); due, when its slot was
// due (zero if not measured); paced, the spacing of the learned pace its slot
// was reserved under (zero if none); edge, a window limit placed it
// (margin.go).
type sending struct {
	complied bool
	due      time.Time
	paced    time.Duration
	edge     bool
}

// sendingOf is how a's request was sent under r.
func sendingOf(r *rule, a *engine.Admission) sending {
	return sending{complied: a.Verdict.Outcome == engine.Sent, due: a.Due(), paced: a.Paced(), edge: r.atEdge(&a.Verdict)}
}

// listen reads resp, sent under rule r for k as s says, records what it
// says through the store failure policy, and reports it.
func (t *Transport) listen(ctx context.Context, r *rule, k keyed, resp *http.Response, s sending) heard {
	now := t.now()
	sig := r.dialect.Read(resp, now) // internal/upstream: a refusal or not, and what the headers say
	r.stats.count(resp, sig.Refused)
	l := r.dialect.Learn(sig)
	if r.IgnoreUpstream {
		if sig.Refused {
			t.report(ctx, Feedback{Rule: r.Name, Key: k.key, Status: resp.StatusCode, Throttled: true})
		}
		// Not recorded, but a retry still waits for it.
		return heard{refused: sig.Refused, pause: l.Pause}
	}
	// A limit the headers state (a route bucket's, learned at its first
	// response) is no move: the slots placed before it fall in the
	// bucket's first window, and taking them anew only delays them.
	move := false
	if s.complied {
		t.fb.measure(r, s.due, now) // margin.go: the path's spread
	}
	switch {
	case !s.complied || !sig.Refused || resp.StatusCode == http.StatusServiceUnavailable:
	case s.edge:
		t.fb.widen(r, k.skey, s.due, now, &l) // margin.go: the path needs a wider margin
	case sig.Bucket != "":
		// A route bucket's refusal: the bucket says how it counts (its
		// limit, learned from its first response, and the wait it
		// states). A pace would not keep its window, and the waiters it
		// moves would take slots in the bucket's next window.
	default:
		move = t.fb.reshape(r, k.skey, sig, s.due, now, s.paced, &l) // shape.go
	}
	if s.complied && !sig.Refused && resp.StatusCode < 300 {
		if pr, ok := t.fb.probe(r, k.skey, s.paced, now); ok { // shape.go: back towards the rule's rate
			t.ease(ctx, r, k, resp.StatusCode, pr)
		}
		if pr, ok := t.fb.marginProbe(r, k.skey, now); ok { // margin.go: back towards the rule's margin
			t.ease(ctx, r, k, resp.StatusCode, pr)
		}
	}
	if !sig.Refused && l.Pause == 0 && !t.fb.news(k.skey, l, now) {
		return heard{}
	}
	return t.record(ctx, r, k, resp.StatusCode, sig.Refused, l, move)
}

// record records what a response (status, refused or not) taught, l, through
// the store failure policy (move: a move to a stricter pace, which the
// waiters placed before it hear of), counts it, and reports it.
func (t *Transport) record(ctx context.Context, r *rule, k keyed, status int, refused bool, l contract.Learned, move bool) heard {
	fb := Feedback{Rule: r.Name, Key: k.key, Status: status, Throttled: refused,
		Pause: l.Pause, Limit: Limit(l.Limit), Paced: Limit(l.Pace), Remaining: l.Remaining, Reset: l.Reset}
	h := heard{refused: refused, pause: l.Pause}
	if l.Pause > 0 || l.Limit.N > 0 || l.Reset > 0 || l.Pace.N > 0 || l.Margin > 0 {
		ef, recorded, err := t.eng.LearnEffect(ctx, k.skey, l, move && l.Pace.N > 0) // internal/engine: recorded, and heard by the waiters
		fb.Err = r.storeErr(err)
		if recorded && l.Margin > 0 {
			r.stats.widenings.Add(1)
			fb.Margin = ef.Margin
		}
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

// ease records a probe, and reports it when the store moved the key back
// towards the rule's shape (another process may have slowed or widened it
// meanwhile), or when it failed.
func (t *Transport) ease(ctx context.Context, r *rule, k keyed, status int, l contract.Learned) {
	ef, _, err := t.eng.LearnEffect(ctx, k.skey, l, false)
	fb := Feedback{Rule: r.Name, Key: k.key, Status: status, Err: r.storeErr(err)}
	switch {
	case err != nil:
	case ef.Hurried && l.Pace.N > 0:
		fb.Eased = true
		fb.Paced = Paced(l.Pace.N, ef.Spacing*time.Duration(l.Pace.N), 0)
	case ef.Narrowed:
		fb.Eased, fb.Margin = true, ef.Margin
	default:
		return
	}
	if fb.Eased {
		r.stats.easings.Add(1)
	}
	t.report(ctx, fb)
}

// news reports whether l tells the store anything it was not told lately by
// this transport: a limit or a pace not recorded in the last quarter of its
// TTL, or a budget for a window (a reset) not recorded yet. It remembers l.
func (f *feedbackState) news(skey string, l contract.Learned, now time.Time) bool {
	if l.Limit.N == 0 && l.Reset == 0 && l.Pace.N == 0 {
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
		l.Reset > 0 && reset != old.reset ||
		l.Pace.N > 0 && (l.Pace != old.pace || now.Sub(old.pacedAt) > l.PaceTTL/4)
	if fresh {
		if l.Limit.N > 0 {
			old.limit, old.at = l.Limit, now
		}
		if l.Pace.N > 0 {
			old.pace, old.pacedAt = l.Pace, now
		}
		if l.Reset > 0 {
			old.reset = reset
		}
		f.told[skey] = old
	}
	return fresh
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
	if fb.Margin > 0 {
		attrs = append(attrs, slog.Duration("learned_margin", fb.Margin))
	}
	if fb.Eased {
		attrs = append(attrs, slog.Bool("eased", true))
	}
	if fb.Reset > 0 {
		attrs = append(attrs, slog.Int("remaining", fb.Remaining), slog.Duration("reset", fb.Reset))
	}
	if fb.Err != nil {
		attrs = append(attrs, slog.String("error", fb.Err.Error()))
	}
	c.logger.LogAttrs(ctx, level, "throttle feedback", attrs...)
}
