package throttletest

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file is what the fakes of real APIs (NewGitHub, NewDiscord, NewMeta,
// NewGoogleMaps, NewStripe, NewShopify, NewSalesforce, NewHubSpot,
// NewReddit, NewSlack, NewX, NewZendesk, NewAWS, one file per family)
// share: an
// Upstream whose answers a dialect decides, in the API's statuses, headers
// and bodies, while its Stats and assertions work as for any Upstream.

// dialect decides the answer of one API to a request.
type dialect interface {
	// answer decides r, arrived at now, with the Upstream's lock held.
	answer(u *Upstream, r *http.Request, now time.Time) answer
}

// formReader is a dialect that reads a request's form (r.Form), parsed
// before its answer is decided.
type formReader interface{ readsForm() bool }

// verdict is how an answer counts in Stats.
type verdict int

const (
	accepted verdict = iota // KeyStats.Accepted
	refused                 // KeyStats.Rejected: a refusal for the API's limits
	neither                 // an error that is no rate limit (Stripe's lock_timeout)
)

// answer is an API's answer to one request.
type answer struct {
	key     string // the key it counts under in Stats
	verdict verdict
	status  int
	header  http.Header
	body    string
	// done, if set, runs with the lock held once the answer is written:
	// the end of a request in flight.
	done func()
}

// newAPI returns an Upstream of d, whose answers carry a Date from its clock, after checking that cfg sets only what
// an API's fake takes (N and Window, which default to n per w, Key, Now,
// Transit, MaxInFlight and ServiceTime), and defaulting Key to key.
func newAPI(name string, cfg Config, n int, w time.Duration, key func(*http.Request) string, d dialect) (*Upstream, error) {
	if cfg.N == 0 && cfg.Window == 0 {
		cfg.N, cfg.Window = n, w
	}
	switch {
	case cfg.Algorithm != SlidingLog || cfg.Burst != 0 || cfg.IETF || cfg.XRateLimit || cfg.NoRetryAfter || len(cfg.Also) > 0:
		return nil, fmt.Errorf("throttletest: %s counts and answers as the API does: set only N, Window, Key, Now, Transit, MaxInFlight and ServiceTime", name)
	case cfg.N < 1 || cfg.Window <= 0:
		return nil, fmt.Errorf("throttletest: %s needs N of at least 1 and a positive Window, or neither", name)
	}
	if cfg.Key == nil {
		cfg.Key = key
	}
	u, err := NewUpstream(cfg)
	if err != nil {
		return nil, err
	}
	u.api = d
	return u, nil
}

// serveAPI is ServeHTTP for an API's fake.
func (u *Upstream) serveAPI(w http.ResponseWriter, r *http.Request) {
	if u.cfg.Transit > 0 {
		t := time.NewTimer(rand.N(u.cfg.Transit))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if f, ok := u.api.(formReader); ok && f.readsForm() {
		_ = r.ParseForm() // before the lock: reading a body may wait
	}
	u.mu.Lock()
	now := u.cfg.Now()
	a := u.api.answer(u, r, now)
	ks := u.state(a.key)
	switch a.verdict {
	case accepted:
		ks.arrivals = append(ks.arrivals, now)
	case refused:
		ks.rejected = append(ks.rejected, now)
	}
	u.mu.Unlock()
	if a.done != nil {
		defer func() {
			u.mu.Lock()
			a.done()
			u.mu.Unlock()
		}()
	}
	if a.verdict == accepted && u.cfg.ServiceTime > 0 {
		t := time.NewTimer(u.cfg.ServiceTime)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	h := w.Header()
	for k, v := range a.header {
		h[k] = v
	}
	h.Set("Content-Type", "application/json")
	// The fake's clock, which may not be the client's: what an epoch
	// reset means is read against it, as from a real API.
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	w.WriteHeader(a.status)
	_, _ = w.Write([]byte(a.body + "\n"))
}

// fixedWindow counts arrivals in a window that opens at the first arrival
// after the previous one closed, as GitHub and Discord count.
type fixedWindow struct {
	end  time.Time
	used int
}

// at moves fw to the window holding now, opening one that ends at end(now)
// when the last has closed.
func (fw *fixedWindow) at(now time.Time, end func(time.Time) time.Time) {
	if !now.Before(fw.end) {
		fw.end, fw.used = end(now), 0
	}
}

// costLog is a sliding log of arrivals with a cost each: the window is
// (now-w, now].
type costLog struct {
	at   []time.Time
	cost []int
	sum  int
}

// trim drops the arrivals at or before now-w.
func (l *costLog) trim(now time.Time, w time.Duration) {
	i := 0
	for i < len(l.at) && !l.at[i].After(now.Add(-w)) {
		l.sum -= l.cost[i]
		i++
	}
	l.at, l.cost = l.at[i:], l.cost[i:]
}

// add records an arrival of cost c at now.
func (l *costLog) add(now time.Time, c int) {
	l.at, l.cost, l.sum = append(l.at, now), append(l.cost, c), l.sum+c
}

// retry is how long after now the log has room for c more of n per w.
func (l *costLog) retry(now time.Time, n, c int, w time.Duration) time.Duration {
	free := n - l.sum
	for i := range l.at {
		if free >= c {
			break
		}
		free += l.cost[i]
		if free >= c {
			return l.at[i].Add(w).Sub(now)
		}
	}
	return 0
}

// bucket is GCRA's state: the theoretical arrival time.
type bucket struct{ tat time.Time }

// take accepts an arrival at now of a bucket of burst+1 refilled every t,
// or says how long until it would.
func (b *bucket) take(now time.Time, t time.Duration, burst int) (ok bool, retry time.Duration) {
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	if ahead, tol := tat.Sub(now), time.Duration(burst)*t; ahead > tol {
		return false, ahead - tol
	}
	b.tat = tat.Add(t)
	return true, 0
}

// fill is how many of the bucket's burst+1 are taken at now, rounded up.
func (b *bucket) fill(now time.Time, t time.Duration) int {
	if !b.tat.After(now) {
		return 0
	}
	return int((b.tat.Sub(now) + t - 1) / t)
}

// keyHeader keys by a header's value (a fake keeps no secret).
func keyHeader(name string) func(*http.Request) string {
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// keyQuery keys by a query parameter, else by a header.
func keyQuery(param, header string) func(*http.Request) string {
	return func(r *http.Request) string {
		if v := r.URL.Query().Get(param); v != "" {
			return v
		}
		return r.Header.Get(header)
	}
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// seconds formats d as seconds with three decimals, rounded up to the
// millisecond, as Discord's and Shopify's fractional headers are.
func seconds(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64)
}

// epochSeconds formats t as Unix seconds with three decimals.
func epochSeconds(t time.Time) string {
	return strconv.FormatFloat(math.Ceil(float64(t.UnixNano())/1e6)/1000, 'f', 3, 64)
}

// hashID is a short stable hex id of s.
func hashID(s string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return strconv.FormatUint(h.Sum64(), 16)
}

// segments splits a path into its non-empty segments.
func segments(path string) []string {
	return strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
}

func errInFlight(name string) error {
	return fmt.Errorf("throttletest: %s takes no MaxInFlight", name)
}

func errSpacing(name string) error {
	return fmt.Errorf("throttletest: %s needs Window/N of at least 1ns", name)
}
