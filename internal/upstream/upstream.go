// Package upstream is a strict fake of a rate-limited third party, for tests
// and examples: an http.Handler that allows at most N requests per key in any
// window of length W, measured on arrival, and answers 429 to the rest.
//
// It is exact: a request arriving at t is accepted if and only if fewer than N
// accepted arrivals of its key lie in (t-W, t]. Rejected requests are not
// logged, so they do not count against later ones. It records what it saw, so
// that a test can check that no client ever exceeded the limit and how much of
// it they used.
package upstream

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Config configures New.
type Config struct {
	// N requests are allowed per key in any window of length Window.
	N      int
	Window time.Duration
	// Key returns the rate key of a request: a constant for a payment
	// gateway, the access_token query value for Instagram. Nil: one key, "".
	Key func(*http.Request) string
	// Transit, if positive, delays each request by a uniformly random
	// duration in [0, Transit) before its arrival is recorded, to simulate
	// the varying time between a client sending and the upstream seeing.
	Transit time.Duration
	// Now is the clock arrivals are read from. Nil: time.Now.
	Now func() time.Time
}

// Upstream is the handler. It is safe for concurrent use.
type Upstream struct {
	cfg Config

	mu   sync.Mutex
	keys map[string]*keyState
}

type keyState struct {
	window   []time.Time // accepted arrivals in the current window, oldest first
	arrivals []time.Time // every accepted arrival
	rejected []time.Time // every rejected arrival
}

// KeyStats is what the upstream saw of one key, or of all keys together.
type KeyStats struct {
	Accepted int
	Rejected int // answered 429
	// RejectedAt holds the arrival time of every rejected request, oldest
	// first.
	RejectedAt []time.Time
	// Arrivals holds the arrival time of every accepted request, oldest
	// first (for all keys together: sorted).
	Arrivals []time.Time
	// FirstAccepted is the first accepted arrival, zero if none.
	FirstAccepted time.Time
}

// Stats is a snapshot of what the upstream saw.
type Stats struct {
	Total KeyStats
	Keys  map[string]KeyStats
}

// New returns an Upstream enforcing cfg.
func New(cfg Config) (*Upstream, error) {
	switch {
	case cfg.N < 1:
		return nil, errors.New("upstream: N must be at least 1")
	case cfg.Window <= 0:
		return nil, errors.New("upstream: Window must be positive")
	case cfg.Transit < 0:
		return nil, errors.New("upstream: Transit must not be negative")
	}
	if cfg.Key == nil {
		cfg.Key = func(*http.Request) string { return "" }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Upstream{cfg: cfg, keys: make(map[string]*keyState)}, nil
}

// ServeHTTP answers 200 with a small JSON body to an accepted request, and 429
// with Retry-After (whole seconds, rounded up) to an excess one. A request
// whose context ends during the simulated transit never arrives.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u.cfg.Transit > 0 {
		t := time.NewTimer(rand.N(u.cfg.Transit))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	key := u.cfg.Key(r)
	ok, retry := u.arrive(key)
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		secs := (retry + time.Second - 1) / time.Second
		w.Header().Set("Retry-After", strconv.FormatInt(int64(max(secs, 1)), 10))
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":"rate limit exceeded"}` + "\n"))
		return
	}
	_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
}

// arrive records an arrival of key now and says whether it is accepted, and
// if not, how long until it would be.
func (u *Upstream) arrive(key string) (ok bool, retry time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	// Read the clock under the lock, so that each key's arrivals are ordered.
	now := u.cfg.Now()
	ks := u.keys[key]
	if ks == nil {
		ks = &keyState{}
		u.keys[key] = ks
	}
	// Drop the arrivals at or before now-W: the window is (now-W, now].
	drop := 0
	for drop < len(ks.window) && !ks.window[drop].After(now.Add(-u.cfg.Window)) {
		drop++
	}
	ks.window = ks.window[drop:]
	if len(ks.window) >= u.cfg.N {
		ks.rejected = append(ks.rejected, now)
		return false, ks.window[len(ks.window)-u.cfg.N].Add(u.cfg.Window).Sub(now)
	}
	ks.window = append(ks.window, now)
	ks.arrivals = append(ks.arrivals, now)
	return true, 0
}

// Stats returns a snapshot of what the upstream saw so far.
func (u *Upstream) Stats() Stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := Stats{Keys: make(map[string]KeyStats, len(u.keys))}
	for k, ks := range u.keys {
		s := KeyStats{
			Accepted:   len(ks.arrivals),
			Rejected:   len(ks.rejected),
			RejectedAt: slices.Clone(ks.rejected),
			Arrivals:   slices.Clone(ks.arrivals),
		}
		if len(ks.arrivals) > 0 {
			s.FirstAccepted = ks.arrivals[0]
		}
		st.Keys[k] = s
		st.Total.Accepted += s.Accepted
		st.Total.Rejected += s.Rejected
		st.Total.Arrivals = append(st.Total.Arrivals, ks.arrivals...)
		st.Total.RejectedAt = append(st.Total.RejectedAt, ks.rejected...)
	}
	byTime := func(a, b time.Time) int { return a.Compare(b) }
	slices.SortFunc(st.Total.Arrivals, byTime)
	slices.SortFunc(st.Total.RejectedAt, byTime)
	if len(st.Total.Arrivals) > 0 {
		st.Total.FirstAccepted = st.Total.Arrivals[0]
	}
	return st
}
