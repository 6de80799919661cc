package throttle

import (
	"errors"
	"fmt"
	"time"
)

// ErrLimited is matched, with errors.Is, by every refusal to send because of a
// limit: a *LimitError. It is found through the *url.Error of http.Client.
var ErrLimited = errors.New("throttle: rate limited")

// ErrInvalidCost is matched by the error for a request whose cost function
// returned a cost below 1 or above one of the rule's limits; it was not sent.
var ErrInvalidCost = errors.New("throttle: invalid cost")

// LimitError says that a request was not sent because its rule's limits had no
// free slot within the time it could wait: at once with Rule.FailFast, else
// within MaxWait and the context's deadline.
type LimitError struct {
	Rule string // the rule's name
	Key  string // the rate key (an Also key's, when its limit refused); keys derived from secrets are hashed
	// Limit is the limit that refused the request, when the store said which.
	Limit Limit
	// RetryAfter is when a request of the same cost would have been admitted,
	// had nobody else reserved meanwhile.
	RetryAfter time.Duration
	// Upstream is set when the wait was imposed by the upstream (a pause
	// after a 429 or a 503 with Retry-After, or a budget of remaining
	// requests that ran out) rather than by the rule's limits, and
	// exceeded the rule's MaxServerWait or MaxWait. A job queue
	// reschedules the work after RetryAfter.
	Upstream bool
	// BeyondDeadline is set when the request could have waited for its slot
	// (not FailFast, RetryAfter within MaxWait, and within MaxServerWait for a
	// wait the upstream imposed) but the slot lay beyond its context's
	// deadline: the deadline refused it, at once, rather than the limit.
	BeyondDeadline bool
	// BeyondMaxWait is set when the slot lay beyond the rule's MaxWait (not
	// FailFast): MaxWait refused the request, whatever the context's deadline.
	// It is not set when the upstream's wait also exceeded a shorter
	// MaxServerWait (see Upstream).
	BeyondMaxWait bool
	// InFlight is set when the rule's InFlight cap refused the request: no
	// lease came free within the time it could wait. RetryAfter is then a
	// guess (docs/concurrency.md): a lease frees when a response body is
	// closed.
	InFlight bool

	inFlightCap int // the cap that refused, when known (for Error)
}

func (e *LimitError) Error() string {
	s := fmt.Sprintf("throttle: rate limited: rule %q, key %q", e.Rule, e.Key)
	if e.Limit.N > 0 {
		s += ", limit " + e.Limit.String()
	}
	if e.Upstream {
		s += ", paused by the upstream"
	}
	switch {
	case e.InFlight && e.inFlightCap > 0:
		s += fmt.Sprintf(", %d of %d requests in flight (responses whose bodies are not yet closed)", e.inFlightCap, e.inFlightCap)
	case e.InFlight:
		s += ", every lease held by requests in flight (responses whose bodies are not yet closed)"
	}
	s += ", retry after " + e.RetryAfter.String()
	switch {
	case e.BeyondDeadline:
		s += ", beyond the context's deadline"
	case e.BeyondMaxWait:
		s += ", beyond the rule's MaxWait"
	}
	return s
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimited }

// KeyError says that a request was not sent because no rate key could be
// derived from it (or that a Limiter was given an empty key). Reason never
// contains the value of a secret.
type KeyError struct {
	Rule   string
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("throttle: no rate key: rule %q: %s", e.Rule, e.Reason)
}

// ConfigError says what is wrong with the configuration given to New.
type ConfigError struct {
	Rule   string // the rule's name, empty for options of the transport
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Rule == "" {
		return "throttle: invalid configuration: " + e.Reason
	}
	return fmt.Sprintf("throttle: invalid configuration: rule %q: %s", e.Rule, e.Reason)
}

// ErrStoreUnavailable is matched by every *StoreError: the shared store
// failed, or is marked down after a failure, so the request was refused (the
// default), sent uncounted (WithFailOpen) or counted locally
// (WithFailLocal).
// It is found through the *url.Error of http.Client.
var ErrStoreUnavailable = errors.New("throttle: store unavailable")

// StoreError says that the shared store could not decide for a request. It
// matches ErrStoreUnavailable with errors.Is, and unwraps to the store's own
// error, through the *url.Error of http.Client too.
type StoreError struct {
	Rule string // the rule's name
	// Err is the store's error: the one this request met or, when NotTried,
	// the failure that marked the store down (or its latest failed probe).
	Err error
	// NotTried is true when the request did not call the store because it
	// is marked down and another request probes it.
	NotTried bool
	// Timeout is true when the store gave no answer within
	// WithStoreTimeout (when NotTried, the failure that marked it down
	// was such a timeout). It is not the caller's own deadline, which
	// ends the request with the context's error instead.
	Timeout bool

	detail string // why WithFailLocal's limiter could not count it either
}

func (e *StoreError) Error() string {
	s := fmt.Sprintf("throttle: rule %q: store unavailable", e.Rule)
	if e.NotTried {
		s += " (not tried: marked down until a probe succeeds)"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s + e.detail
}

// Is makes errors.Is(err, ErrStoreUnavailable) true.
func (e *StoreError) Is(target error) bool { return target == ErrStoreUnavailable }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// UnmatchedError says that a request was not sent because none of the
// transport's rules matched it and there is no default rule. errors.As
// finds it through the *url.Error of http.Client.
type UnmatchedError struct {
	// Host is the request's host name, lower-cased, with its port if the
	// URL has one. The path and the query, which may hold secrets, are left
	// out.
	Host string
}

func (e *UnmatchedError) Error() string {
	return fmt.Sprintf("throttle: no rule matches host %q, so the request was not sent: "+
		"add a Rule for it (WithRule), a default rule (WithDefault), "+
		"or send unmatched requests without a limit (WithUnmatchedSent)", e.Host)
}

// errCanceled is what Reservation.Wait returns after Cancel.
var errCanceled = errors.New("throttle: the reservation was canceled")
