package throttle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// This file keeps the logs of WithLogger readable under load: a refusal or a
// store failure that repeats, for the same rule and outcome, is logged in
// full once per logInterval, and what was left out is summed up in one line
// with a count. It runs no goroutine: a summary is written by the next event
// of its kind after the interval.

// logInterval is how long, after a line is logged in full, the repeats of the
// same rule and kind are only counted.
const logInterval = 10 * time.Second

// logKind is what a line repeats: a rule's decisions of one outcome (local
// or not), or its feedback of one kind.
type logKind struct {
	rule     string
	outcome  Outcome
	local    bool
	feedback feedbackKind // none for a decision
}

type feedbackKind int8

const (
	noFeedback      feedbackKind = iota
	throttledAnswer              // a 429, a 503 with Retry-After, or a pause
	feedbackFailed               // the store failed to record feedback
	bodyNotClosed                // a lease reclaimed from a body not closed (reclaimed)
)

// name is what the events of kind k are: an outcome ("limited",
// "sent_local"), "throttled" or "feedback_failed".
func (k logKind) name() string {
	switch k.feedback {
	case throttledAnswer:
		return "throttled"
	case feedbackFailed:
		return "feedback_failed"
	case bodyNotClosed:
		return "body_not_closed"
	}
	if k.local {
		return k.outcome.String() + "_local"
	}
	return k.outcome.String()
}

// noun is what the events of kind k are about.
func (k logKind) noun() string {
	if k.feedback != noFeedback {
		return "responses"
	}
	return "decisions"
}

// logLimiter holds, per kind, the window of the last line logged in full.
type logLimiter struct {
	mu      sync.Mutex
	windows map[logKind]*logWindow // bounded: rules × kinds
}

type logWindow struct {
	start time.Time // of the window: its first line or summary
	last  time.Time // the latest event counted
	n     int       // the events counted since start, not logged
}

// logFull reports whether an event of kind k, logged at level, is to be
// logged in full now. Within logInterval of the last line of its kind it is
// only counted. After the interval, the count is logged as one summary line;
// the event is then logged in full unless its kind is still repeating (an
// event within the interval before it), when it is counted in the next
// summary instead: one line per interval while a refusal or an outage lasts.
func (c *core) logFull(ctx context.Context, level slog.Level, k logKind) bool {
	now := c.now()
	l := &c.logs
	l.mu.Lock()
	w := l.windows[k]
	if w == nil {
		if l.windows == nil {
			l.windows = make(map[logKind]*logWindow)
		}
		l.windows[k] = &logWindow{start: now}
		l.mu.Unlock()
		return true
	}
	if now.Sub(w.start) < logInterval {
		w.n++
		w.last = now
		l.mu.Unlock()
		return false
	}
	n, since := w.n, now.Sub(w.start)
	full := n == 0 || now.Sub(w.last) >= logInterval
	*w = logWindow{start: now}
	if !full {
		w.n, w.last = 1, now
	}
	l.mu.Unlock()
	if n > 0 {
		// Up to the second, so that "in the last" stays true.
		since = (since + time.Second - 1).Truncate(time.Second)
		c.logger.LogAttrs(ctx, level, fmt.Sprintf("throttle: %d more %q %s for rule %q in the last %s", n, k.name(), k.noun(), k.rule, since),
			slog.String("rule", k.rule), slog.String("outcome", k.name()), slog.Int("count", n), slog.Duration("interval", since))
	}
	return full
}

// reclaimed warns that a response body was not closed within held: its
// request's lease under the rule's InFlight was given back
// (engine.Config.OnReclaim).
func (c *core) reclaimed(rule string, held time.Duration) {
	ctx := context.Background()
	if c.logger == nil || !c.logger.Enabled(ctx, slog.LevelWarn) ||
		!c.logFull(ctx, slog.LevelWarn, logKind{rule: rule, feedback: bodyNotClosed}) {
		return
	}
	c.logger.LogAttrs(ctx, slog.LevelWarn,
		fmt.Sprintf("throttle: rule %q: a response body was not closed within %s: its lease under InFlight is given back; close every response body", rule, held),
		slog.String("rule", rule), slog.Duration("held", held))
}
