package throttle

import (
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"time"

	"github.com/throttle-go/throttle/store"
)

// An Option configures New or NewLimiter.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// config is what the options set; New and NewLimiter validate it.
type config struct {
	rules        []*rule
	def          *rule
	onDecision   func(Decision)
	onFeedback   func(Feedback)
	logger       *slog.Logger
	keySecret    []byte
	failOpen     bool    // WithFailOpen
	localShare   float64 // WithFailLocal: above 0
	storeTimeout time.Duration
	unmatched    unmatchedPolicy
	unmatchedSet bool
}

// configure checks the store and applies opts.
func configure(st store.Store, opts []Option) (config, error) {
	var c config
	if st == nil || isNilPointer(st) {
		return c, &ConfigError{Reason: "nil store"}
	}
	for _, o := range opts {
		if o == nil {
			return c, &ConfigError{Reason: "nil option"}
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithRule adds a rule. Rules may be given in any order; see Rule for which
// one a request gets.
func WithRule(r Rule) Option {
	return optionFunc(func(c *config) error {
		cr, err := compile(r, false)
		if err != nil {
			return err
		}
		c.rules = append(c.rules, cr)
		return nil
	})
}

// WithDefault sets the rule of requests that no other rule matches. Without
// one, they are refused, unless WithUnmatchedSent says to send them.
func WithDefault(r Rule) Option {
	return optionFunc(func(c *config) error {
		if c.def != nil {
			return &ConfigError{Reason: "WithDefault given twice"}
		}
		cr, err := compile(r, true)
		if err != nil {
			return err
		}
		c.def = cr
		return nil
	})
}

// WithUnmatchedSent makes the transport send a request that no rule
// matches, when there is no default rule, without a limit, instead of
// refusing it with an *UnmatchedError (the default: a host the rules miss, a
// typo or a proxy's address, would otherwise go unlimited unseen). Only its
// Decision says so (outcome Unmatched, logged at Debug), unless warn is
// true: then a warning is logged the first time each host is met, to the
// WithLogger logger or, without one, to slog.Default(); after 1000 hosts,
// one last warning says that later hosts go unreported. It cannot be given
// with WithDefault.
func WithUnmatchedSent(warn bool) Option {
	return optionFunc(func(c *config) error {
		c.unmatched, c.unmatchedSet = sendUnmatched, true
		if warn {
			c.unmatched = warnUnmatched
		}
		return nil
	})
}

// WithOnDecision calls f once per request with the transport's decision,
// before RoundTrip returns: for Sent, once the request is written (maybe on
// another goroutine than the request's). A Limiter calls it once per Wait, Allow and
// Reservation (or failed Reserve). f must be quick and safe for concurrent use.
func WithOnDecision(f func(Decision)) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return &ConfigError{Reason: "WithOnDecision: nil function"}
		}
		c.onDecision = f
		return nil
	})
}

// WithOnFeedback calls f after every response that said something about its
// key's limits (a 429, a 503 with Retry-After, a limit, a budget or a usage
// learned from the headers), on the request's goroutine, before RoundTrip
// returns; and after every Limiter.Pause. f must be quick and safe for
// concurrent use.
func WithOnFeedback(f func(Feedback)) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return &ConfigError{Reason: "WithOnFeedback: nil function"}
		}
		c.onFeedback = f
		return nil
	})
}

// WithLogger logs every decision to l: refusals by a limit at Info, store
// failures and requests refused for want of a rule at Warn, the rest at
// Debug; WithUnmatchedSent(true)'s warnings go to l too. A line above Debug that
// repeats (same rule and outcome) is logged once per 10s, then summed up in
// one line with a count. The transport logs nothing without it (but for
// WithUnmatchedSent(true), which then warns to slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return &ConfigError{Reason: "WithLogger: nil logger"}
		}
		c.logger = l
		return nil
	})
}

// minKeySecretLen is the shortest secret WithKeySecret accepts.
const minKeySecretLen = 16

// WithKeySecret makes the transport replace every rate key with "hmac:" and
// the first 128 bits of HMAC-SHA256(secret, key), in hex, before it reaches
// the store, the decisions, the logs and the errors: without a secret, anyone
// who can read Redis or a log can test a guessed token against its plain
// SHA-256. Every process that shares the limits must use the same secret. The
// secret must be at least 16 bytes (32 random bytes are best);
// it is copied.
func WithKeySecret(secret []byte) Option {
	return optionFunc(func(c *config) error {
		if len(secret) < minKeySecretLen {
			return &ConfigError{Reason: fmt.Sprintf("WithKeySecret: the secret has %d bytes; it needs at least %d", len(secret), minKeySecretLen)}
		}
		c.keySecret = append([]byte(nil), secret...)
		return nil
	})
}

// WithFailOpen makes a request that meets a failed store, or one marked
// down, go out uncounted (Outcome FailedOpen) instead of being refused with a
// *StoreError, the default. A store that answers but refuses its server
// (store.ErrEvictingPolicy) has not failed: its requests are refused all the
// same. It cannot be given with WithFailLocal.
func WithFailOpen() Option {
	return optionFunc(func(c *config) error {
		c.failOpen = true
		return nil
	})
}

// WithFailLocal makes a request that meets a failed store, or one marked
// down, be counted in a limiter inside this process instead of being refused
// with a *StoreError (the default), under the same rules, keys and waits,
// with share of every limit: a limit of N per W becomes floor(N × share) per
// W, at least 1. With one transport per worker, 1/workers keeps the fleet
// within the limit once every worker is local. While the shared store is up,
// every send it admits is recorded locally too, so that a switch to local
// starts from this process's recent sends. Decision.Local says that the
// local limiter decided. As under WithFailOpen, a store that refuses its
// server (store.ErrEvictingPolicy) has not failed. share must be in (0, 1].
// It cannot be given with WithFailOpen.
func WithFailLocal(share float64) Option {
	return optionFunc(func(c *config) error {
		if math.IsNaN(share) || share <= 0 || share > 1 {
			return &ConfigError{Reason: fmt.Sprintf("WithFailLocal(%v): the share must be above 0 and at most 1", share)}
		}
		c.localShare = share
		return nil
	})
}

// WithStoreTimeout bounds each Reserve call to the shared store (default: one
// second). A call that takes longer, while the request's own context is
// still live, is a store failure (a *StoreError whose Timeout is set).
// Without the bound, a client that retries its dials would make the
// request's own deadline pass first.
//
// A store failure (an error that is not the request's context ending) marks
// the store down: until a probe succeeds, requests do not call it and are
// refused with a *StoreError at once (or sent, or counted locally: see
// WithFailOpen and WithFailLocal). One request at a time probes it, after a
// backoff from 50ms up to at most 600ms; the first probe that succeeds marks
// the store up again.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return &ConfigError{Reason: fmt.Sprintf("WithStoreTimeout(%s): the timeout must be positive", d)}
		}
		c.storeTimeout = d
		return nil
	})
}

// isNilPointer reports whether v, a non-nil interface, holds a nil pointer
// (or another nil reference): a typed nil that would panic at request time,
// so New refuses it.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
