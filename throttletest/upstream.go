// Package throttletest helps test a client that must keep a third party's
// rate limit, such as one built on throttle.Transport.
//
// Upstream is a strict fake of the third party: an http.Handler that allows
// at most N requests per key in any window of length W, measured on arrival,
// and answers 429 to the rest; or, with Config.Algorithm, counts as a GCRA
// (token bucket) or in fixed windows. Serve it with NewServer (or
// net/http/httptest), point the client at it, and check its Stats, or assert
// with RequireNoRejections and AssertWithin: a client that keeps the limit
// meets no 429. NewServer counts a request when it reached the server's
// socket, not when the test's process got round to it, which on a loaded
// machine may be many milliseconds later.
//
// NewGitHub, NewDiscord, NewMeta, NewGoogleMaps, NewStripe, NewShopify,
// NewSalesforce, NewHubSpot, NewReddit, NewSlack, NewX, NewZendesk and
// NewAWS return fakes of those APIs: each counts as its API documents and
// answers in its dialect (its statuses, headers and bodies: GitHub's 403s,
// Google's 200 OVER_QUERY_LIMIT, Stripe's lock_timeout, AWS's 400 with an
// error code), so that a client can be
// tested against what the API will say, with the same Stats and
// assertions.
package throttletest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Algorithm is how an Upstream counts the arrivals of a key.
type Algorithm int

const (
	// SlidingLog accepts an arrival at t if fewer than N accepted arrivals
	// lie in (t-Window, t]. It is the default.
	SlidingLog Algorithm = iota
	// GCRA accepts one arrival every Window/N (rounded down to the
	// nanosecond), and Burst more at once after an idle spell: a token
	// bucket of Burst+1 tokens refilled at N per Window, as x/time/rate
	// (burst Burst+1), throttled's GCRA (MaxBurst Burst) and redis-cell
	// count. Burst 0 is strict spacing: two arrivals closer than Window/N
	// are refused.
	GCRA
	// FixedWindow accepts at most N arrivals in each aligned window
	// [k·Window, (k+1)·Window) since the Unix epoch.
	FixedWindow
)

var algorithmNames = [...]string{"log", "gcra", "fixed"}

// String returns the short name of a: "log", "gcra" or "fixed".
func (a Algorithm) String() string {
	if a >= 0 && int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// Config configures NewUpstream.
type Config struct {
	// N is how many requests of one key are accepted in any window of
	// length Window (per Window, for GCRA and FixedWindow).
	N int
	// Window is the length of the window; it must be positive.
	Window time.Duration
	// Algorithm is how arrivals are counted; the zero value is SlidingLog.
	Algorithm Algorithm
	// Burst is GCRA's tolerance: how many arrivals beyond one may come at
	// once (0 <= Burst; GCRA only).
	Burst int
	// Key returns the rate key of a request: a constant for a payment
	// gateway, the access_token query value for Instagram. Nil: one key, "".
	Key func(*http.Request) string
	// Transit, if positive, delays each request by a uniformly random
	// duration in [0, Transit) before its arrival is recorded, to simulate
	// the varying time between a client sending and the upstream seeing.
	Transit time.Duration
	// Now is the clock arrivals are read from. Nil: time.Now, or, for a
	// request served by NewServer, when it reached the server's socket.
	Now func() time.Time

	// NoRetryAfter leaves Retry-After out of the 429s.
	NoRetryAfter bool
	// IETF adds the fields of draft-ietf-httpapi-ratelimit-headers to every
	// answer: RateLimit-Policy: "default";q=N;w=W and RateLimit:
	// "default";r=remaining;t=seconds until the oldest arrival in the
	// window leaves it (rounded up). W must then be whole seconds.
	IETF bool
	// XRateLimit adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (epoch seconds, rounded up) to every answer, as
	// GitHub does.
	XRateLimit bool
	// Also are more limits, each N per Window on its own Key (e.g. the
	// whole app's, beside each token's), that a request must pass too: it
	// is accepted only if every one has room, and then counted in all
	// (SlidingLog only; each takes only N, Window and Key). Upstream.Also
	// gives their counts. Not with MaxInFlight.
	Also []Config

	// MaxInFlight, if positive, caps the requests of one key being answered
	// at once, as APIs that limit concurrent requests do: a request that
	// arrives while MaxInFlight are in flight is answered 429 at once (and
	// counts against nothing). A request is in flight from its arrival until
	// its answer is written, ServiceTime later.
	MaxInFlight int
	// ServiceTime is how long an accepted request takes to answer.
	ServiceTime time.Duration
}

// Upstream is a strict fake of a rate-limited third party: an http.Handler
// that accepts a request arriving at t if and only if its Algorithm does
// (by default: fewer than N accepted arrivals of its key lie in (t-W, t]),
// and answers 429 otherwise. A rejected request counts against nothing. It records
// every arrival, so that a test can check that no client exceeded the limit
// and how much of it they used. It is safe for concurrent use.
type Upstream struct {
	cfg  Config
	also []*Upstream // Config.Also (tiers.go)
	api  dialect     // the API a fake of one speaks for (api.go), or nil
	// stamped: Config.Now is time.Now, so a request's arrival is when it
	// reached the socket of a NewServer, when one served it (server.go).
	stamped bool

	mu   sync.Mutex
	keys map[string]*keyState
}

// keyState is what an Upstream knows of one key. Arrivals timed by a
// NewServer may be decided out of order (one that reached the socket first
// may reach the lock second), so every list is kept in the order of
// arrival, and a decision counts the arrivals on both sides of its own.
type keyState struct {
	arrivals []time.Time // every accepted arrival, oldest first
	tats     []time.Time // GCRA: the theoretical arrival time after each accepted arrival
	rejected []time.Time // every rejected arrival, oldest first
	inFlight int         // MaxInFlight: requests being answered now
	atArrive []int       // MaxInFlight: inFlight at each accepted arrival
}

// KeyStats is what the upstream saw of one key, or of all keys together.
type KeyStats struct {
	// Accepted counts the requests answered 200.
	Accepted int
	// Rejected counts the requests answered 429.
	Rejected int
	// RejectedAt holds the arrival time of every rejected request, oldest
	// first.
	RejectedAt []time.Time
	// Arrivals holds the arrival time of every accepted request, oldest
	// first (for all keys together: sorted).
	Arrivals []time.Time
	// FirstAccepted is the first accepted arrival, zero if none.
	FirstAccepted time.Time
	// InFlight holds, with MaxInFlight, for each accepted arrival
	// (Arrivals[i]), how many requests of the key were in flight then, it
	// included (nil for Total).
	InFlight []int
}

// Stats is a snapshot of what the upstream saw.
type Stats struct {
	// Total is what the upstream saw of all keys together.
	Total KeyStats
	// Keys holds what it saw of each key, by the name Config.Key gave.
	Keys map[string]KeyStats
}

// NewUpstream returns an Upstream enforcing cfg, or an error if cfg is
// invalid.
func NewUpstream(cfg Config) (*Upstream, error) {
	switch {
	case cfg.N < 1:
		return nil, errors.New("throttletest: N must be at least 1")
	case cfg.Window <= 0:
		return nil, errors.New("throttletest: Window must be positive")
	case cfg.Transit < 0:
		return nil, errors.New("throttletest: Transit must not be negative")
	case cfg.IETF && cfg.Window%time.Second != 0:
		return nil, errors.New("throttletest: IETF headers need a Window of whole seconds")
	case cfg.Algorithm < SlidingLog || cfg.Algorithm > FixedWindow:
		return nil, fmt.Errorf("throttletest: unknown %s", cfg.Algorithm)
	case cfg.Burst < 0 || cfg.Burst > 0 && cfg.Algorithm != GCRA:
		return nil, errors.New("throttletest: Burst must be 0, or positive for GCRA")
	case cfg.Algorithm == GCRA && cfg.Window/time.Duration(cfg.N) <= 0:
		return nil, errors.New("throttletest: GCRA needs Window/N of at least 1ns")
	case cfg.MaxInFlight < 0 || cfg.ServiceTime < 0:
		return nil, errors.New("throttletest: MaxInFlight and ServiceTime must not be negative")
	case cfg.MaxInFlight > 0 && len(cfg.Also) > 0:
		return nil, errors.New("throttletest: MaxInFlight with Also is not supported")
	}
	if cfg.Key == nil {
		cfg.Key = func(*http.Request) string { return "" }
	}
	stamped := cfg.Now == nil
	if stamped {
		cfg.Now = time.Now
	}
	also, err := newTiers(cfg)
	if err != nil {
		return nil, err
	}
	return &Upstream{cfg: cfg, also: also, stamped: stamped, keys: make(map[string]*keyState)}, nil
}

// ServeHTTP answers 200 with a small JSON body to an accepted request, and 429
// with Retry-After (whole seconds, rounded up; unless NoRetryAfter) to an
// excess one, with the rate-limit headers the Config asks for; the fake of
// an API answers as that API does. A request whose context ends during the
// simulated transit never arrives. A request arrives when it is counted
// (read from Config.Now), or, served by NewServer on the real clock, when it
// reached the server's socket (plus its transit).
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u.api != nil {
		u.serveAPI(w, r)
		return
	}
	var at time.Time // zero: read the clock when counting
	if u.stamped {
		at, _ = arrived(r)
	}
	if u.cfg.Transit > 0 {
		d := rand.N(u.cfg.Transit)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		if !at.IsZero() {
			at = at.Add(d)
		}
	}
	key := u.cfg.Key(r)
	arrive := func() (time.Time, bool, time.Duration, int, time.Duration) { return u.arrive(key, at) }
	if u.also != nil {
		arrive = func() (time.Time, bool, time.Duration, int, time.Duration) { return u.arriveTiers(key, r, at) }
	}
	now, ok, retry, remaining, reset := arrive()
	if ok && u.cfg.MaxInFlight > 0 {
		// Answered (and out of flight) before the client can read the end
		// of the answer: net/http sends it after the handler returns.
		defer u.done(key)
	}
	if ok && u.cfg.ServiceTime > 0 {
		t := time.NewTimer(u.cfg.ServiceTime)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	ceilSecs := func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
	if u.cfg.IETF {
		h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, u.cfg.N, int64(u.cfg.Window/time.Second)))
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, remaining, ceilSecs(reset)))
	}
	if u.cfg.XRateLimit {
		h.Set("X-RateLimit-Limit", strconv.Itoa(u.cfg.N))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSecs(time.Duration(now.Add(reset).UnixNano())), 10))
	}
	if !ok {
		if !u.cfg.NoRetryAfter {
			h.Set("Retry-After", strconv.FormatInt(max(ceilSecs(retry), 1), 10))
		}
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":"rate limit exceeded"}` + "\n"))
		return
	}
	_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
}

// arrive records an arrival of key at at (zero: now) and says whether it is
// accepted, and if not, how long until it would be; and how many more the
// window admits then, and when its oldest arrival leaves it (0 when it is
// empty).
func (u *Upstream) arrive(key string, at time.Time) (now time.Time, ok bool, retry time.Duration, remaining int, reset time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	// Read the clock under the lock, so that each key's arrivals are ordered.
	now = at
	if now.IsZero() {
		now = u.cfg.Now()
	}
	ks := u.state(key)
	if u.cfg.MaxInFlight > 0 && ks.inFlight >= u.cfg.MaxInFlight {
		ks.rejected = insertTime(ks.rejected, now)
		return now, false, 0, 0, 0
	}
	var tats []time.Time
	switch u.cfg.Algorithm {
	case GCRA:
		ok, retry, remaining, reset, tats = u.gcra(ks, now)
	case FixedWindow:
		ok, retry, remaining, reset = u.fixed(ks, now)
	default:
		ok, retry, remaining, reset = u.room(ks, now) // tiers.go
		if ok && remaining == u.cfg.N {
			reset = u.cfg.Window // the window had none: this one leaves it last
		}
		if ok {
			remaining--
		}
	}
	if !ok {
		ks.rejected = insertTime(ks.rejected, now)
		return now, ok, retry, remaining, reset
	}
	i := ks.record(now)
	if tats != nil { // the later arrivals' are recomputed with this one
		ks.tats = append(ks.tats[:i], tats...)
	}
	if u.cfg.MaxInFlight > 0 {
		ks.inFlight++
		ks.atArrive = slices.Insert(ks.atArrive, i, ks.inFlight)
	}
	return now, ok, retry, remaining, reset
}

// record inserts the accepted arrival now in order and returns its index.
func (ks *keyState) record(now time.Time) int {
	i := after(ks.arrivals, now)
	ks.arrivals = slices.Insert(ks.arrivals, i, now)
	return i
}

// after returns the index of the first of ts (in order) after t.
func after(ts []time.Time, t time.Time) int {
	return sort.Search(len(ts), func(i int) bool { return ts[i].After(t) })
}

// insertTime inserts t into ts in order.
func insertTime(ts []time.Time, t time.Time) []time.Time {
	return slices.Insert(ts, after(ts, t), t)
}

// gcra is arrive's GCRA: accepted when the theoretical arrival time left by
// the earlier arrivals is at most Burst spacings ahead of now, and the later
// ones (decided first) still conform with it; reset is when the bucket is
// full again. Accepted, it returns the theoretical arrival times after now
// and after each later arrival.
func (u *Upstream) gcra(ks *keyState, now time.Time) (ok bool, retry time.Duration, remaining int, reset time.Duration, tats []time.Time) {
	T := u.cfg.Window / time.Duration(u.cfg.N)
	tol := time.Duration(u.cfg.Burst) * T
	i := after(ks.arrivals, now)
	var tat time.Time
	if i > 0 {
		tat = ks.tats[i-1]
	}
	for j, a := range append([]time.Time{now}, ks.arrivals[i:]...) {
		if tat.Before(a) {
			tat = a
		}
		if ahead := tat.Sub(a); ahead > tol {
			if j == 0 {
				return false, ahead - tol, 0, ahead, nil
			}
			return false, ahead - tol, 0, tats[0].Sub(now), nil // a later arrival would no longer conform
		}
		tat = tat.Add(T)
		tats = append(tats, tat)
	}
	ahead := tats[0].Sub(now)
	return true, 0, int((tol + T - ahead) / T), ahead, tats
}

// fixed is arrive's FixedWindow.
func (u *Upstream) fixed(ks *keyState, now time.Time) (ok bool, retry time.Duration, remaining int, reset time.Duration) {
	w := int64(u.cfg.Window)
	k := now.UnixNano() / w
	reset = time.Duration((k+1)*w - now.UnixNano())
	from, to := time.Unix(0, k*w), time.Unix(0, (k+1)*w)
	count := sort.Search(len(ks.arrivals), func(i int) bool { return !ks.arrivals[i].Before(to) }) -
		sort.Search(len(ks.arrivals), func(i int) bool { return !ks.arrivals[i].Before(from) })
	if count >= u.cfg.N {
		return false, reset, 0, reset
	}
	return true, 0, u.cfg.N - count - 1, reset
}

// done ends the flight of a request of key.
func (u *Upstream) done(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.keys[key].inFlight--
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
			InFlight:   slices.Clone(ks.atArrive),
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
