package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/store"
)

// TestMain fails the package if any test leaves a goroutine behind: waiting
// requests, timers of cancelled contexts and AfterFuncs must all be gone.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// isA reports whether err, or an error it wraps, is a T: the typed errors
// that have no sentinel (*KeyError, *UnmatchedError, *ConfigError).
func isA[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// is returns a check that an error matches target, as isA's.
func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// storePolicy is a store failure policy as the tests name it.
type storePolicy string

const (
	failClosed storePolicy = "FailClosed" // the default: no option
	failOpen   storePolicy = "FailOpen"   // WithFailOpen
	failLocal  storePolicy = "FailLocal"  // WithFailLocal
)

// options returns the options that choose p; share is WithFailLocal's.
func (p storePolicy) options(share float64) []throttle.Option {
	switch p {
	case failOpen:
		return []throttle.Option{throttle.WithFailOpen()}
	case failLocal:
		return []throttle.Option{throttle.WithFailLocal(share)}
	}
	return nil
}

// roundTripperFunc is a fake base transport.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// okResponse is the 200 of the fake upstream.
func okResponse(req *http.Request) *http.Response {
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: req,
	}
}

// sendLog is a fake upstream that records what it received and when (on the
// synctest clock inside a bubble).
type sendLog struct {
	mu    sync.Mutex
	reqs  []*http.Request
	times []time.Time
}

func (s *sendLog) base() http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reqs = append(s.reqs, r)
		s.times = append(s.times, time.Now())
		return okResponse(r), nil
	})
}

func (s *sendLog) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// decisionLog records every Decision of a Transport.
type decisionLog struct {
	mu   sync.Mutex
	list []throttle.Decision
}

func (d *decisionLog) option() throttle.Option {
	return throttle.WithOnDecision(func(x throttle.Decision) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.list = append(d.list, x)
	})
}

func (d *decisionLog) all() []throttle.Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]throttle.Decision(nil), d.list...)
}

func (d *decisionLog) last(t *testing.T) throttle.Decision {
	t.Helper()
	all := d.all()
	require.NotEmpty(t, all, "no decision was reported")
	return all[len(all)-1]
}

// trackedBody is a request body that records whether it was read or closed.
type trackedBody struct {
	r      io.Reader
	reads  atomic.Int32
	closes atomic.Int32
}

func newBody(s string) *trackedBody { return &trackedBody{r: strings.NewReader(s)} }

func (b *trackedBody) Read(p []byte) (int, error) { b.reads.Add(1); return b.r.Read(p) }
func (b *trackedBody) Close() error               { b.closes.Add(1); return nil }

func newMemory(t *testing.T) store.Store {
	t.Helper()
	m, err := store.NewMemory()
	require.NoError(t, err)
	return m
}

// newTransport returns a transport that has measured its lateness (see
// throttle.Measured): the tests of exact send times start there.
func newTransport(t *testing.T, base http.RoundTripper, st store.Store, opts ...throttle.Option) *throttle.Transport {
	t.Helper()
	if st == nil {
		st = newMemory(t)
	}
	tr, err := throttle.New(base, st, opts...)
	require.NoError(t, err)
	return throttle.Measured(tr)
}

// secret is a token that must never show up in keys, decisions, logs or errors.
const secret = "tok-SECRET-7f3a9c"

// newRequest returns a request that carries secret in its Authorization
// header and its query, with a tracked body.
func newRequest(t *testing.T, ctx context.Context, method, rawURL string) (*http.Request, *trackedBody) {
	t.Helper()
	body := newBody("payload")
	req, err := http.NewRequestWithContext(ctx, method, rawURL, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("X-Tenant", "acme")
	req.Header.Add("Accept", "application/json")
	req.Header.Add("Accept", "text/plain")
	return req, body
}

// send sends one throwaway request through tr and requires it to be sent.
func send(t *testing.T, tr http.RoundTripper, rawURL string) {
	t.Helper()
	req, _ := newRequest(t, context.Background(), http.MethodGet, rawURL)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// elapsed runs f and returns how much (synctest) time it took.
func elapsed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

const testURL = "https://api.example.com/v1/items?access_token=" + secret + "&x=1"

// failingStore is a store whose every Reserve fails at once with err.
func failingStore(err error) store.Store {
	s := fakestore.New()
	s.Fail(err, 0)
	return s
}
