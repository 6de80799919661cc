package throttle

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/throttle-go/throttle/internal/engine"
)

// Outcome is what the transport did with a request.
type Outcome int

const (
	// Sent: the request was admitted and handed to the base transport,
	// after waiting Delay.
	Sent Outcome = iota
	// Limited: no slot within the time the request could wait; it was
	// refused with a *LimitError and nothing was recorded.
	Limited
	// Canceled: the context ended before or while the request waited for
	// its slot; the context's error is returned and the slot given back
	// (best effort, in the background).
	Canceled
	// Failed: the key, the cost or the store failed (with a *StoreError,
	// the default store failure policy); nothing was sent.
	Failed
	// FailedOpen: the store failed or is marked down and the transport is
	// configured to fail open (WithFailOpen), so the request was sent
	// without being counted. Under WithFailLocal, such requests are Sent,
	// Limited or Canceled with Decision.Local set instead.
	FailedOpen
	// Unmatched: no rule and no default rule matched; the request was
	// refused with an *UnmatchedError in Err (the default, logged at
	// Warn), or sent without a limit (WithUnmatchedSent).
	Unmatched
)

var outcomeNames = [...]string{"sent", "limited", "canceled", "failed", "failed_open", "unmatched"}

func (o Outcome) String() string {
	if o < 0 || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// Decision describes what the transport decided for one request, or a
// Limiter for one use (Sent: it may go ahead). It never
// holds a secret: keys derived from tokens are hashed, and no URL is included.
type Decision struct {
	Rule    string
	Key     string
	Cost    int
	Outcome Outcome
	// Delay is how long the request waited for its slot (Sent, Canceled).
	Delay time.Duration
	// Retaken counts the slots the request gave back, taking the next free
	// one instead: because it woke, or got its connection, more than its
	// Allowance plus the rule's retake threshold after them (a stalled
	// process; at most 2), or because its key was paused or moved to a
	// stricter pace after the slot was placed (at most 2 more).
	Retaken int
	// Allowance is how late after its slot this process may send: the
	// largest lateness it measured in the last second or two, and at least
	// 5ms for a slot of Lanes or Tenant that others may take. The log
	// records the request that much after its slot. Before the process has
	// measured anything it is a cautious 100ms. Zero for the counting
	// algorithms and with NoMargin.
	Allowance time.Duration
	// RetryAfter is when a request would be admitted (Limited).
	RetryAfter time.Duration
	// Upstream is set when the refusal came from a wait the upstream
	// imposed (see LimitError.Upstream).
	Upstream bool
	// Attempt numbers the sends of one RoundTrip when the rule retries
	// throttled responses: 0 for the first, 1 for the first retry, ...
	Attempt int
	// Limit is the limit that set the delay or the refusal, zero if none did.
	Limit Limit
	// Local is true when the shared store failed or is marked down and the
	// transport's in-process limiter decided instead (WithFailLocal).
	Local bool
	// Err is the error returned to the caller (Limited, Canceled, Failed),
	// or the *StoreError that made the transport send uncounted
	// (FailedOpen) or count locally (Sent with Local).
	Err error
	// InFlight is set when the rule's InFlight cap held the request back:
	// it waited in the queue for Queued (included in Delay when Sent), or
	// was refused for want of a lease (see LimitError.InFlight).
	InFlight bool
	Queued   time.Duration
	// Lane is the request's lane (Rule.Lanes). Took is set when its slot
	// was a lower lane's, taken from a waiting request; Bumped counts the
	// times a higher lane took the slot it waited for (each time it went
	// one slot later).
	Lane   int
	Took   bool
	Bumped int
	// Tenant is the request's tenant (Rule.Tenant), as Key is reported:
	// its name, keyed with the secret of WithKeySecret if there is one
	// (long names hashed). Under tenants, Took is set when the request
	// took the slot of a waiting request of a later turn when it asked,
	// and Bumped counts the times another tenant's earlier turn took the
	// slot it waited for.
	Tenant string
	// Shadow is set for the decision of a shadow rule (Rule.Shadow): what
	// the rule would have done, had it been enforced. Its Outcome, Delay
	// and Err are the would-be ones; the request was neither delayed nor
	// refused by it.
	Shadow bool
}

// decision maps v, the engine's verdict for k under r, to the Decision and
// its error: the one place where the engine's words become the public ones.
func (r *rule) decision(k keyed, v *engine.Verdict) Decision {
	d := Decision{Rule: r.Name, Key: k.key, Cost: k.cost, Outcome: Outcome(v.Outcome), Delay: v.Delay,
		Retaken: v.Retaken, Allowance: v.Allowance, RetryAfter: v.RetryAfter, Upstream: v.Upstream,
		Local: v.Local, Err: r.storeErr(v.Err), InFlight: v.InFlight, Queued: v.Queued,
		Lane: k.lane, Took: v.Took, Bumped: v.Bumped, Tenant: k.tenant}
	key := k.key
	if v.HasLimit {
		key, d.Limit = r.limitOf(v.LimitPart, v.LimitIdx, k) // the rule's key or one of Also
	}
	switch {
	case d.Outcome != Limited:
	case v.InFlight:
		d.Err = &LimitError{Rule: r.Name, Key: k.key, RetryAfter: v.RetryAfter, InFlight: true, inFlightCap: v.Cap}
	default:
		d.Err = &LimitError{Rule: r.Name, Key: key, Limit: d.Limit, RetryAfter: v.RetryAfter, Upstream: v.Upstream,
			BeyondDeadline: v.BeyondDeadline, BeyondMaxWait: v.BeyondMaxWait}
	}
	return d
}

// limitOf returns the key and the limit that set a slot (the store's
// CauseLimit), the i-th of part: the rule's own (part 0), or one of its Also.
func (r *rule) limitOf(part, i int, k keyed) (key string, l Limit) {
	switch {
	case part == 0 && i < len(r.Limits):
		return k.key, r.Limits[i]
	case part > 0 && part <= len(r.also) && i < len(r.also[part-1].own):
		a := r.also[part-1]
		_, key, _ = strings.Cut(k.also[part-1].Key, a.scope) // without the tag and scope, as k.key
		return key, a.own[i]
	case part > len(r.also) && part <= len(k.also):
		return r.unitLimitOf(k.also[part-1], i, k) // cost.go
	}
	return k.key, Limit{}
}

// failed is the Decision for k under r when err, the key's or the cost's,
// keeps it from admission.
func (r *rule) failed(k keyed, err error) Decision {
	return Decision{Rule: r.Name, Key: k.key, Cost: k.cost, Outcome: Failed, Err: err}
}

// storeErr is err as a user sees it: a failure of the shared store is a
// *StoreError of r.
func (r *rule) storeErr(err error) error {
	if d, ok := err.(*engine.Down); ok {
		return &StoreError{Rule: r.Name, Err: d.Err, NotTried: d.NotTried, Timeout: errors.Is(d.Err, engine.ErrTimeout), detail: d.Detail}
	}
	return err
}

// observe counts d in s, the counters of its rule (or of the unmatched
// requests), and reports it to the hook and the logger, if any. Repeated
// lines above Debug are summed up (logs.go).
func (c *core) observe(ctx context.Context, s *ruleStats, d Decision) {
	c.pub.touch() // publish.go
	s.record(d)
	s.recent.note(c.eng.Now, d) // saturation.go
	s.tenants.note(c.eng.Now, d)
	if c.onDecision != nil {
		c.onDecision(d)
	}
	if c.logger == nil {
		return
	}
	level := slog.LevelDebug
	switch d.Outcome {
	case Failed, FailedOpen:
		level = slog.LevelWarn
	case Sent:
		if d.Local {
			level = slog.LevelWarn
		}
	case Limited:
		level = slog.LevelInfo
	case Unmatched:
		if d.Err != nil {
			level = slog.LevelWarn
		}
	}
	if !c.logger.Enabled(ctx, level) ||
		level > slog.LevelDebug && !c.logFull(ctx, level, logKind{rule: d.Rule, outcome: d.Outcome, local: d.Local}) {
		return
	}
	attrs := []slog.Attr{
		slog.String("rule", d.Rule),
		slog.String("key", d.Key),
		slog.String("outcome", d.Outcome.String()),
		slog.Int("cost", d.Cost),
	}
	if d.Local {
		attrs = append(attrs, slog.Bool("local", true))
	}
	if d.Shadow {
		attrs = append(attrs, slog.Bool("shadow", true))
	}
	if d.Delay > 0 {
		attrs = append(attrs, slog.Duration("delay", d.Delay))
	}
	if d.RetryAfter > 0 {
		attrs = append(attrs, slog.Duration("retry_after", d.RetryAfter))
	}
	if d.Limit.N > 0 {
		attrs = append(attrs, slog.String("limit", d.Limit.String()))
	}
	if d.InFlight {
		attrs = append(attrs, slog.Duration("queued", d.Queued))
	}
	if d.Err != nil {
		attrs = append(attrs, slog.String("error", d.Err.Error()))
	}
	c.logger.LogAttrs(ctx, level, "throttle decision", attrs...)
}
