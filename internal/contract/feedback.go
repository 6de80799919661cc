package contract

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Feedback is the part of a store that shares what the upstream said about a
// key with every process: a pause (after a 429, or a 503 with Retry-After),
// a learned limit tighter than the configured ones, a learned pace, and a
// budget of units left before a reset. Reserve honours them in the same
// atomic step as the reservation. Redis and Memory keep it (Caps.Feedback);
// a store that does not returns ErrUnsupported and is used without feedback.
//
// Durations are relative to the call, and the store turns them into times on
// its own clock (Redis TIME), so clients' clocks do not matter.
type Feedback interface {
	// Pause makes every reservation of key wait until at least d from now.
	// Pauses merge to the latest end: a pause is never shortened.
	Pause(ctx context.Context, key string, d time.Duration) error
	// Learn records what the upstream's rate-limit headers said about key.
	Learn(ctx context.Context, key string, l Learned) error
}

// Effector is the part of a Feedback store that says what a Learn did to
// the key's learned margin and pace, for the caller to report (Redis and
// Memory). LearnEffect is Learn, and its Effect.
type Effector interface {
	LearnEffect(ctx context.Context, key string, l Learned) (Effect, error)
}

// Effect is what a Learn did to a key's learned margin and pace, as far as
// its Learned asked to change them (zero otherwise).
type Effect struct {
	// Margin is the learned margin after a widening or a margin probe
	// (beyond the request's own), valid for MarginFor (0: none holds).
	Margin, MarginFor time.Duration
	// Narrowed is set when the margin probe halved the margin (or
	// dropped it).
	Narrowed bool
	// Hurried is set when the probe moved the learned pace towards
	// Learned.Pace; Spacing is its spacing after.
	Hurried bool
	Spacing time.Duration
}

// Learned is what the upstream's headers said about a key. Zero fields say
// nothing. Whatever it holds can only delay reservations, never admit one
// that the request's own limits would refuse.
type Learned struct {
	// Pause, if positive, pauses the key (as Feedback.Pause).
	Pause time.Duration
	// Limit, if N > 0, is applied beside the request's limits for LimitTTL
	// (then forgotten, unless learned again). The latest learned limit
	// replaces an earlier one. Reserve ignores a learned limit whose window
	// is longer than the request's longest unless its N is at most the
	// request's largest (the log keeps that many entries): SlidingLog then
	// keeps the learned window, so a key's log never holds more entries
	// than its configured limits keep or its window's reservations; the
	// counting algorithms ignore it.
	Limit    Limit
	LimitTTL time.Duration
	// Pace, if N > 0, is a paced limit (Paced set; N per Per with Burst)
	// applied to the key's SlidingLog reservations for PaceTTL: a
	// request's own paced limit, if any, takes the larger spacing and the
	// smaller burst of the two, and a request without one is paced as if
	// it had this one (a cost above Burst+1 is still one send). A pace
	// learned while an earlier one holds keeps the longer spacing and the
	// smaller burst of the two, and the later end. The counting algorithms
	// (FixedWindow, SlidingCounter, Buckets) ignore it.
	Pace    Limit
	PaceTTL time.Duration
	// Probe, if positive, makes Pace a probe towards the configured rate
	// rather than a pace to keep: when a learned pace holds whose spacing
	// is longer than Pace's and that was not slowed (nor probed) for
	// Probe, its spacing moves halfway to Pace's (to it, once within 1 %
	// of it); nothing else changes (its
	// burst, its end), and a key without a learned pace learns none. A
	// pace is never hurried past Pace, the configured rate's.
	Probe time.Duration
	// Margin, if positive, widens the key's SlidingLog window limits
	// beyond the margin already in them, for MarginTTL: the path between
	// the fleet and the upstream varies by more than that margin. A key
	// with no margin learned, or one learned within MarginAge (the
	// refused request's slot was placed before it, under a narrower
	// margin), takes the larger of the two; otherwise the learned margin
	// m becomes 2m + Margin (the whole margin doubled, when Margin is the
	// rule's own plus twice the refused send's lateness), at most
	// MarginCap. Paced limits are not widened.
	Margin, MarginTTL, MarginCap, MarginAge time.Duration
	// MarginProbe, if positive, probes the learned margin back towards
	// none: one that holds and was neither widened nor probed for
	// MarginProbe halves (and is dropped below a millisecond); nothing
	// else is written.
	MarginProbe time.Duration
	// Remaining units may be sent before Reset (from now), if Reset is
	// positive: a budget. Reserve takes its units from it, and a request
	// that finds it short waits until Reset, as for a pause. Within one
	// window (resets less than ResetSlack apart) the smaller remaining
	// wins; a later window replaces it.
	Remaining int
	Reset     time.Duration
}

// ResetSlack is how far apart two resets may be and still name the same
// window: the headers give resets in whole seconds, and different responses
// round them differently.
const ResetSlack = 2 * time.Second

// MaxFeedback bounds every duration a store accepts in Learned and Pause;
// callers cap what the upstream says well below it (the throttle package
// caps a pause at an hour).
const MaxFeedback = 366 * 24 * time.Hour

// ErrInvalidFeedback is returned, wrapped, for feedback no store should keep:
// negative or too long durations, a negative N or remaining, a limit or pace
// without a window or TTL, a pace that is not Paced.
var ErrInvalidFeedback = errors.New("store: invalid feedback")

// Validate reports whether l is well formed; every store calls it first.
func (l Learned) Validate(key string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidFeedback}, args...)...)
	}
	switch {
	case key == "":
		return bad("empty key")
	case l.Pause < 0 || l.Pause > MaxFeedback:
		return bad("pause %s outside 0..%s", l.Pause, MaxFeedback)
	case l.Limit.N < 0:
		return bad("negative limit %s", l.Limit)
	case l.Limit.N > 0 && (l.Limit.Per < time.Microsecond || l.Limit.Per > MaxFeedback):
		return bad("limit %s: window outside 1µs..%s", l.Limit, MaxFeedback)
	case l.Limit.N > 0 && (l.LimitTTL <= 0 || l.LimitTTL > MaxFeedback):
		return bad("limit TTL %s outside (0, %s]", l.LimitTTL, MaxFeedback)
	case l.Pace.N < 0:
		return bad("negative pace %s", l.Pace)
	case l.Pace.N > 0 && !l.Pace.Paced:
		return bad("pace %s is not a paced limit", l.Pace)
	case l.Pace.N > 0 && (l.Pace.Per < time.Microsecond || l.Pace.Per > MaxFeedback):
		return bad("pace %s: window outside 1µs..%s", l.Pace, MaxFeedback)
	case l.Pace.N > 0 && (l.Pace.Burst < 0 || l.Pace.Burst > l.Pace.N):
		return bad("pace %s: burst outside 0..N", l.Pace)
	case l.Pace.N > 0 && (l.PaceTTL <= 0 || l.PaceTTL > MaxFeedback):
		return bad("pace TTL %s outside (0, %s]", l.PaceTTL, MaxFeedback)
	case l.Probe < 0 || l.Probe > MaxFeedback:
		return bad("probe %s outside 0..%s", l.Probe, MaxFeedback)
	case l.Probe > 0 && l.Pace.N == 0:
		return bad("a probe without a pace")
	case l.Margin < 0 || l.Margin > MaxFeedback || l.MarginCap < 0 || l.MarginCap > MaxFeedback ||
		l.MarginAge < 0 || l.MarginAge > MaxFeedback:
		return bad("margin %s (cap %s, age %s) outside 0..%s", l.Margin, l.MarginCap, l.MarginAge, MaxFeedback)
	case l.Margin > 0 && (l.MarginTTL <= 0 || l.MarginTTL > MaxFeedback || l.MarginCap < l.Margin):
		return bad("margin %s: TTL %s outside (0, %s] or cap %s below it", l.Margin, l.MarginTTL, MaxFeedback, l.MarginCap)
	case l.MarginProbe < 0 || l.MarginProbe > MaxFeedback:
		return bad("margin probe %s outside 0..%s", l.MarginProbe, MaxFeedback)
	case l.Remaining < 0:
		return bad("negative remaining %d", l.Remaining)
	case l.Reset < 0 || l.Reset > MaxFeedback:
		return bad("reset %s outside 0..%s", l.Reset, MaxFeedback)
	}
	return nil
}

// Empty reports whether l says nothing.
func (l Learned) Empty() bool {
	return l.Pause <= 0 && l.Limit.N == 0 && l.Pace.N == 0 && l.Reset <= 0 && l.Margin <= 0 && l.MarginProbe <= 0
}

// ServerWait is the longest delay a pause or an exhausted budget may impose
// on r.
func (r Request) ServerWait() time.Duration {
	if r.MaxServerWait > 0 && r.MaxServerWait < r.MaxWait {
		return r.MaxServerWait
	}
	return r.MaxWait
}

// MaxN is the largest N of the window limits among limits (paced ones
// left out; 0 when none, and no log is kept): SlidingLog counts a learned
// limit whose window is longer than the request's longest when its N is at
// most this, since the log keeps that many entries anyway (log.lua).
func MaxN(limits []Limit) int {
	n := 0
	for _, l := range limits {
		if !l.Paced {
			n = max(n, l.N)
		}
	}
	return n
}
