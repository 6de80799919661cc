package throttle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

// TestMain fails the package if any test leaves a goroutine behind: waiting
// requests, timers of cancelled contexts and AfterFuncs must all be gone.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// errStore is a store.Store that always fails.
type errStore struct{ err error }

func (s errStore) Reserve(context.Context, string, store.Request) (store.Reservation, error) {
	return store.Reservation{}, s.err
}
func (s errStore) Cancel(context.Context, store.Reservation) error { return s.err }

func newMemory(t *testing.T) *store.Memory {
	t.Helper()
	m, err := store.NewMemory()
	require.NoError(t, err)
	return m
}

func newTransport(t *testing.T, base http.RoundTripper, st store.Store, opts ...throttle.Option) *throttle.Transport {
	t.Helper()
	if st == nil {
		st = newMemory(t)
	}
	tr, err := throttle.New(base, st, opts...)
	require.NoError(t, err)
	return tr
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

// TestRoundTripPaths walks every path of RoundTrip and checks, on each, that
// the caller's request is never mutated, that the body is closed exactly when
// the base is not called, and what the caller and the hook are told.
func TestRoundTripPaths(t *testing.T) {
	errBoom := errors.New("boom: redis is down")
	perTick := []throttle.Limit{throttle.Per(1, 100*time.Millisecond)}
	tests := []struct {
		name        string
		rule        throttle.Rule
		opts        []throttle.Option
		st          store.Store
		prime       int  // requests sent first, to fill the limit
		preCancel   bool // the context is done before RoundTrip
		cancelAfter time.Duration
		timeout     time.Duration
		wantBase    bool
		wantErr     error
		wantOutcome throttle.Outcome
		wantDelay   time.Duration
	}{
		{
			name:        "sent at once",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			wantBase:    true,
			wantOutcome: throttle.Sent,
		},
		{
			name:        "sent after waiting",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k"), Margin: throttle.NoMargin},
			prime:       1,
			wantBase:    true,
			wantOutcome: throttle.Sent,
			wantDelay:   100 * time.Millisecond,
		},
		{
			name:        "limited: fail fast",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k"), Mode: throttle.FailFast},
			prime:       1,
			wantErr:     throttle.ErrLimited,
			wantOutcome: throttle.Limited,
		},
		{
			name:        "limited: slot beyond MaxWait",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k"), MaxWait: 50 * time.Millisecond},
			prime:       1,
			wantErr:     throttle.ErrLimited,
			wantOutcome: throttle.Limited,
		},
		{
			name:        "limited: slot beyond the context deadline",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			prime:       1,
			timeout:     50 * time.Millisecond,
			wantErr:     throttle.ErrLimited,
			wantOutcome: throttle.Limited,
		},
		{
			name:        "no key",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.ByHeader("X-Missing")},
			wantErr:     throttle.ErrNoKey,
			wantOutcome: throttle.Failed,
		},
		{
			name: "invalid cost",
			rule: throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k"),
				Cost: func(*http.Request) int { return 0 }},
			wantErr:     throttle.ErrInvalidCost,
			wantOutcome: throttle.Failed,
		},
		{
			name:        "canceled while waiting",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k"), Margin: throttle.NoMargin},
			prime:       1,
			cancelAfter: 30 * time.Millisecond,
			wantErr:     context.Canceled,
			wantOutcome: throttle.Canceled,
			wantDelay:   100 * time.Millisecond,
		},
		{
			name:        "context already done",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			preCancel:   true,
			wantErr:     context.Canceled,
			wantOutcome: throttle.Canceled,
		},
		{
			name:        "store error, fail closed",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			st:          errStore{errBoom},
			wantErr:     errBoom,
			wantOutcome: throttle.Failed,
		},
		{
			name:        "store error, fail open",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			opts:        []throttle.Option{throttle.WithStoreFailure(throttle.FailOpen)},
			st:          errStore{errBoom},
			wantBase:    true,
			wantOutcome: throttle.FailedOpen,
		},
		{
			name:        "unmatched",
			rule:        throttle.Rule{Host: "other.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			wantBase:    true,
			wantOutcome: throttle.Unmatched,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				var decisions decisionLog
				opts := append([]throttle.Option{throttle.WithRule(tc.rule), decisions.option()}, tc.opts...)
				tr := newTransport(t, sent.base(), tc.st, opts...)
				for range tc.prime {
					send(t, tr, "https://api.example.com/prime")
				}
				require.Equal(t, tc.prime, sent.count())

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.timeout > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				if tc.preCancel {
					cancel()
				}
				if tc.cancelAfter > 0 {
					timer := time.AfterFunc(tc.cancelAfter, cancel)
					defer timer.Stop()
				}
				req, body := newRequest(t, ctx, http.MethodPost, testURL)
				snapshot := req.Clone(ctx)

				var resp *http.Response
				var err error
				took := elapsed(func() { resp, err = tr.RoundTrip(req) })

				// The caller's request is untouched on every path.
				assert.Equal(t, snapshot, req)
				assert.Equal(t, snapshot.URL.String(), req.URL.String())
				assert.Equal(t, snapshot.Header, req.Header)
				assert.Zero(t, body.reads.Load(), "the transport read the body")

				d := decisions.last(t)
				assert.Equal(t, tc.wantOutcome, d.Outcome)
				assert.Equal(t, tc.wantDelay, d.Delay)
				if tc.wantBase {
					require.NoError(t, err)
					require.NotNil(t, resp)
					require.Equal(t, tc.prime+1, sent.count())
					assert.Same(t, req, sent.reqs[tc.prime], "the base must get the caller's request itself")
					assert.Zero(t, body.closes.Load(), "the body belongs to the base once it is called")
					assert.Equal(t, tc.wantDelay, took)
					return
				}
				require.Error(t, err)
				assert.Nil(t, resp)
				assert.ErrorIs(t, err, tc.wantErr)
				assert.Equal(t, err, d.Err)
				assert.Equal(t, tc.prime, sent.count(), "nothing may be sent")
				assert.Equal(t, int32(1), body.closes.Load(), "the body must be closed once")
				switch tc.wantOutcome {
				case throttle.Canceled:
					assert.Equal(t, tc.cancelAfter, took, "returns as soon as the context ends")
				default:
					assert.Zero(t, took, "refusals are immediate")
				}
			})
		})
	}
}

// TestRoundTripNilRequest checks the guard against a nil URL.
func TestRoundTripNilRequest(t *testing.T) {
	tr := newTransport(t, roundTripperFunc(func(*http.Request) (*http.Response, error) {
		t.Error("base called")
		return nil, errors.New("unreachable")
	}), nil, throttle.WithDefault(throttle.Rule{Limits: []throttle.Limit{throttle.PerSecond(1)}}))
	body := newBody("x")
	_, err := tr.RoundTrip(&http.Request{Body: body})
	require.Error(t, err)
	assert.Equal(t, int32(1), body.closes.Load())
	_, err = tr.RoundTrip(nil)
	assert.Error(t, err)
}

// TestErrorsThroughClient checks that the sentinel errors and the typed errors
// are found through the *url.Error that http.Client wraps them in.
func TestErrorsThroughClient(t *testing.T) {
	limit := throttle.Per(2, time.Hour)
	newClient := func(t *testing.T, r throttle.Rule) (*http.Client, *sendLog) {
		var sent sendLog
		return &http.Client{Transport: newTransport(t, sent.base(), nil, throttle.WithRule(r))}, &sent
	}

	t.Run("limited", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, sent := newClient(t, throttle.Rule{Name: "gw", Host: "api.example.com", Limits: []throttle.Limit{limit},
				Key: throttle.ByBearerToken(), Mode: throttle.FailFast})
			for range 2 {
				req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
				resp, err := c.Do(req)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
			}
			time.Sleep(10 * time.Minute)
			req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
			resp, err := c.Do(req)
			require.Error(t, err)
			assert.Nil(t, resp)
			var uerr *url.Error
			require.ErrorAs(t, err, &uerr)
			assert.ErrorIs(t, err, throttle.ErrLimited)
			assert.NotErrorIs(t, err, throttle.ErrNoKey)
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, "gw", le.Rule)
			assert.True(t, strings.HasPrefix(le.Key, "bearer:"), le.Key)
			assert.Equal(t, limit, le.Limit)
			assert.Equal(t, 50*time.Minute+throttle.DefaultMargin, le.RetryAfter)
			assert.Equal(t, 2, sent.count())
		})
	})

	t.Run("no key", func(t *testing.T) {
		c, sent := newClient(t, throttle.Rule{Name: "tenant", Host: "api.example.com", Limits: []throttle.Limit{limit},
			Key: throttle.ByHeader("X-Api-Key")})
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err := c.Do(req)
		require.Error(t, err)
		assert.ErrorIs(t, err, throttle.ErrNoKey)
		assert.NotErrorIs(t, err, throttle.ErrLimited)
		var ke *throttle.KeyError
		require.ErrorAs(t, err, &ke)
		assert.Equal(t, "tenant", ke.Rule)
		assert.Equal(t, "no X-Api-Key header", ke.Reason)
		assert.Zero(t, sent.count())
	})

	t.Run("invalid cost", func(t *testing.T) {
		c, sent := newClient(t, throttle.Rule{Name: "costly", Host: "api.example.com", Limits: []throttle.Limit{limit},
			Cost: func(*http.Request) int { return 3 }})
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err := c.Do(req)
		require.Error(t, err)
		assert.ErrorIs(t, err, throttle.ErrInvalidCost)
		assert.Contains(t, err.Error(), `rule "costly": cost 3 is outside 1..2`)
		assert.Zero(t, sent.count())
	})
}

// TestWaitMode checks the delays of Wait mode to the microsecond.
func TestWaitMode(t *testing.T) {
	const n, w = 3, 200 * time.Millisecond
	tests := []struct {
		name   string
		margin time.Duration
		want   time.Duration
	}{
		{name: "no margin", margin: throttle.NoMargin, want: w},
		{name: "default margin", margin: 0, want: w + throttle.DefaultMargin},
		{name: "explicit margin", margin: 25 * time.Millisecond, want: w + 25*time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				var decisions decisionLog
				tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
					Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(n, w)}, Margin: tc.margin,
				}))
				start := time.Now()
				for range n {
					assert.Zero(t, elapsed(func() { send(t, tr, testURL) }))
				}
				assert.Equal(t, tc.want, elapsed(func() { send(t, tr, testURL) }), "the (N+1)-th request")
				d := decisions.last(t)
				assert.Equal(t, throttle.Sent, d.Outcome)
				assert.Equal(t, tc.want, d.Delay)
				assert.Equal(t, throttle.Per(n, w), d.Limit)
				assert.Equal(t, "host:api.example.com", d.Key)
				require.Equal(t, n+1, sent.count())
				assert.Equal(t, tc.want, sent.times[n].Sub(start))
			})
		})
	}
}

// TestWaitModeRefusals checks that a slot too far away is refused at once.
func TestWaitModeRefusals(t *testing.T) {
	const w = 100 * time.Millisecond
	tests := []struct {
		name    string
		maxWait time.Duration
		timeout time.Duration
		wantErr bool
	}{
		{name: "slot within MaxWait", maxWait: w},
		{name: "slot beyond MaxWait", maxWait: w - time.Microsecond, wantErr: true},
		{name: "slot before the deadline", timeout: w + time.Millisecond},
		{name: "slot beyond the deadline", timeout: w - time.Millisecond, wantErr: true},
		{name: "deadline nearer than MaxWait", maxWait: time.Hour, timeout: w / 2, wantErr: true},
		{name: "MaxWait nearer than deadline", maxWait: w / 2, timeout: time.Hour, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
					Name: "r", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(1, w)},
					Key: throttle.Fixed("k"), MaxWait: tc.maxWait, Margin: throttle.NoMargin,
				}))
				send(t, tr, testURL)
				ctx := context.Background()
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				req, _ := newRequest(t, ctx, http.MethodGet, testURL)
				var err error
				took := elapsed(func() { _, err = tr.RoundTrip(req) })
				if !tc.wantErr {
					require.NoError(t, err)
					assert.Equal(t, w, took)
					assert.Equal(t, 2, sent.count())
					return
				}
				assert.Zero(t, took)
				var le *throttle.LimitError
				require.ErrorAs(t, err, &le)
				assert.Equal(t, throttle.LimitError{Rule: "r", Key: "k", Limit: throttle.Per(1, w), RetryAfter: w}, *le)
				assert.Equal(t, 1, sent.count())

				// Nothing was recorded: a request after the window is sent at once.
				time.Sleep(w)
				assert.Zero(t, elapsed(func() { send(t, tr, testURL) }))
			})
		})
	}
}

// TestFailFast checks that FailFast refuses at once, with RetryAfter.
func TestFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
			Name: "ff", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(2, time.Second)},
			Key: throttle.Fixed("gw"), Mode: throttle.FailFast, Margin: throttle.NoMargin,
		}))
		send(t, tr, testURL)
		time.Sleep(300 * time.Millisecond)
		send(t, tr, testURL)

		req, body := newRequest(t, context.Background(), http.MethodGet, testURL)
		var err error
		assert.Zero(t, elapsed(func() { _, err = tr.RoundTrip(req) }))
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, 700*time.Millisecond, le.RetryAfter)
		assert.Equal(t, int32(1), body.closes.Load())

		time.Sleep(le.RetryAfter)
		send(t, tr, testURL)
		assert.Equal(t, 3, sent.count())
	})
}

// TestCancelGivesSlotBack checks that a request whose context ends while it
// waits returns the context's error and gives its slot to the next request.
func TestCancelGivesSlotBack(t *testing.T) {
	const w = 100 * time.Millisecond
	tests := []struct {
		name   string
		limits []throttle.Limit
	}{
		{
			name:   "binding limit below the longest",
			limits: []throttle.Limit{throttle.Per(1, w), throttle.Per(100, time.Hour)},
		},
		{
			// The log holds just N entries when the slot is reserved: the
			// cancel must still not free the unit sent at t=0.
			name:   "single limit",
			limits: []throttle.Limit{throttle.Per(1, w)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				var decisions decisionLog
				tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
					Host: "api.example.com", Limits: tc.limits, Key: throttle.Fixed("k"), Margin: throttle.NoMargin,
				}))
				send(t, tr, testURL) // t=0: fills the window up to t=w

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, body := newRequest(t, ctx, http.MethodGet, testURL)
				errc := make(chan error, 1)
				go func() {
					_, err := tr.RoundTrip(req) // reserves the slot at t=w
					errc <- err
				}()
				time.Sleep(w / 4)
				synctest.Wait()
				require.Empty(t, errc, "the request must still be waiting")
				cancel()
				synctest.Wait()
				require.ErrorIs(t, <-errc, context.Canceled)
				assert.Equal(t, int32(1), body.closes.Load())
				d := decisions.last(t)
				assert.Equal(t, throttle.Canceled, d.Outcome)
				assert.Equal(t, w, d.Delay)

				// The next request gets the cancelled slot, w from the start,
				// not the one after it.
				assert.Equal(t, w-w/4, elapsed(func() { send(t, tr, testURL) }))
				assert.Equal(t, 2, sent.count())
			})
		})
	}
}

// TestSeveralLimits checks that the binding limit sets the delay and is named.
func TestSeveralLimits(t *testing.T) {
	fast, slow := throttle.Per(2, 100*time.Millisecond), throttle.Per(5, time.Second)
	limits := []throttle.Limit{fast, slow}

	t.Run("wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var sent sendLog
			var decisions decisionLog
			tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
				Host: "api.example.com", Limits: limits, Margin: throttle.NoMargin,
			}))
			ms := time.Millisecond
			want := []struct {
				delay time.Duration
				limit throttle.Limit
			}{
				{0, throttle.Limit{}},
				{0, throttle.Limit{}},
				{100 * ms, fast},
				{0, throttle.Limit{}},
				{100 * ms, fast},
				{800 * ms, slow},
				{0, throttle.Limit{}},
				{100 * ms, fast},
			}
			for range want {
				send(t, tr, testURL)
			}
			got := decisions.all()
			require.Len(t, got, len(want))
			for i, w := range want {
				assert.Equal(t, w.delay, got[i].Delay, "request %d", i+1)
				assert.Equal(t, w.limit, got[i].Limit, "request %d", i+1)
			}
			start := sent.times[0]
			var at []time.Duration
			for _, s := range sent.times {
				at = append(at, s.Sub(start))
			}
			assert.Equal(t, []time.Duration{0, 0, 100 * ms, 100 * ms, 200 * ms, 1000 * ms, 1000 * ms, 1100 * ms}, at)
		})
	})

	t.Run("fail fast", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var sent sendLog
			tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
				Name: "two", Host: "api.example.com", Limits: limits, Mode: throttle.FailFast, Margin: throttle.NoMargin,
			}))
			refused := func() *throttle.LimitError {
				t.Helper()
				req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
				_, err := tr.RoundTrip(req)
				var le *throttle.LimitError
				require.ErrorAs(t, err, &le)
				return le
			}
			send(t, tr, testURL)
			send(t, tr, testURL)
			le := refused()
			assert.Equal(t, fast, le.Limit)
			assert.Equal(t, 100*time.Millisecond, le.RetryAfter)
			assert.Contains(t, le.Error(), "limit 2/100ms")

			time.Sleep(100 * time.Millisecond)
			send(t, tr, testURL)
			send(t, tr, testURL)
			time.Sleep(100 * time.Millisecond)
			send(t, tr, testURL)
			le = refused()
			assert.Equal(t, slow, le.Limit)
			assert.Equal(t, 800*time.Millisecond, le.RetryAfter)
			assert.Contains(t, le.Error(), "limit 5/1s")
			assert.Equal(t, 5, sent.count())
		})
	})
}

// TestCost checks that a request takes the units its cost function says.
func TestCost(t *testing.T) {
	costOf := func(r *http.Request) int {
		n, err := strconv.Atoi(r.Header.Get("X-Cost"))
		if err != nil {
			return 1
		}
		return n
	}
	newCostly := func(t *testing.T) (*throttle.Transport, *sendLog, *decisionLog) {
		var sent sendLog
		var decisions decisionLog
		tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
			Name: "c", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(5, time.Second), throttle.Per(9, time.Hour)},
			Key: throttle.Fixed("k"), Cost: costOf, Mode: throttle.FailFast, Margin: throttle.NoMargin,
		}))
		return tr, &sent, &decisions
	}
	try := func(t *testing.T, tr http.RoundTripper, cost int) (*trackedBody, error) {
		req, body := newRequest(t, context.Background(), http.MethodPost, testURL)
		req.Header.Set("X-Cost", strconv.Itoa(cost))
		_, err := tr.RoundTrip(req)
		return body, err
	}

	t.Run("units", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tr, sent, decisions := newCostly(t)
			_, err := try(t, tr, 3)
			require.NoError(t, err)
			assert.Equal(t, 3, decisions.last(t).Cost)
			_, err = try(t, tr, 3)
			assert.ErrorIs(t, err, throttle.ErrLimited, "3+3 > 5")
			_, err = try(t, tr, 2)
			require.NoError(t, err, "3+2 = 5")
			_, err = try(t, tr, 1)
			assert.ErrorIs(t, err, throttle.ErrLimited, "5+1 > 5")
			assert.Equal(t, 2, sent.count())
		})
	})

	for _, cost := range []int{0, -1, 6, 100} {
		t.Run("invalid "+strconv.Itoa(cost), func(t *testing.T) {
			tr, sent, decisions := newCostly(t)
			body, err := try(t, tr, cost)
			require.ErrorIs(t, err, throttle.ErrInvalidCost)
			assert.NotErrorIs(t, err, throttle.ErrLimited)
			assert.Contains(t, err.Error(), "cost "+strconv.Itoa(cost)+" is outside 1..5")
			assert.Zero(t, sent.count())
			assert.Equal(t, int32(1), body.closes.Load())
			assert.Equal(t, throttle.Failed, decisions.last(t).Outcome)

			// Nothing was recorded: the full limit is still free.
			_, err = try(t, tr, 5)
			assert.NoError(t, err)
		})
	}
}

// TestRuleMatching checks which rule a request gets.
func TestRuleMatching(t *testing.T) {
	lim := []throttle.Limit{throttle.PerSecond(1000)}
	rules := []throttle.Rule{
		{Name: "exact", Host: "api.example.com", Limits: lim},
		{Name: "wild", Host: "*.example.com", Limits: lim},
		{Name: "pay8443", Host: "Pay.Example.com:8443", Limits: lim},
		{Name: "v1", Host: "api.example.com", PathPrefix: "/v1/", Limits: lim},
		{Name: "v1users", Host: "api.example.com", PathPrefix: "/v1/users", Limits: lim},
		{Name: "post", Host: "api.example.com", Method: http.MethodPost, Limits: lim},
		{Name: "wildv1", Host: "*.example.com", PathPrefix: "/v1/", Limits: lim},
		{Name: "anyport", Host: "ports.example.com", Limits: lim},
		{Name: "port443", Host: "ports.example.com:443", Limits: lim},
	}
	tests := []struct {
		name   string
		method string
		url    string
		host   string // if set, URL.Host is cleared and Host set, as on a server
		want   string // rule name; "" means unmatched
		noDef  string // the rule without a default rule, if it differs
	}{
		{name: "exact host", url: "https://api.example.com/x", want: "exact"},
		{name: "exact host with any port", url: "http://api.example.com:8080/x", want: "exact"},
		{name: "host case", url: "https://API.Example.COM/x", want: "exact"},
		{name: "host:port", url: "https://pay.example.com:8443/x", want: "pay8443"},
		{name: "host:port other port", url: "https://pay.example.com:9443/x", want: "wild"},
		{name: "host:port without port", url: "https://pay.example.com/x", want: "wild"},
		{name: "wildcard", url: "https://a.b.example.com/x", want: "wild"},
		{name: "wildcard not the apex", url: "https://example.com/x", want: "default", noDef: ""},
		{name: "wildcard not a suffix trick", url: "https://badexample.com/x", want: "default", noDef: ""},
		{name: "path prefix", url: "https://api.example.com/v1/things", want: "v1"},
		{name: "longest path prefix", url: "https://api.example.com/v1/users/7", want: "v1users"},
		{name: "prefix is not a segment match", url: "https://api.example.com/v1", want: "exact"},
		{name: "method", method: http.MethodPost, url: "https://api.example.com/x", want: "post"},
		{name: "prefix beats method", method: http.MethodPost, url: "https://api.example.com/v1/users", want: "v1users"},
		{name: "exact beats wildcard", url: "https://api.example.com/v2", want: "exact"},
		{name: "wildcard with prefix beats exact", url: "https://api.example.com/v1/x", want: "v1"},
		{name: "wildcard with prefix", url: "https://w.example.com/v1/x", want: "wildv1"},
		{name: "Host when URL.Host is empty", url: "https://ignored.invalid/x", host: "api.example.com:443", want: "exact"},
		{name: "other host", url: "https://other.org/x", want: "default", noDef: ""},
		{name: "a port beats any port", url: "https://ports.example.com:443/x", want: "port443"},
		{name: "the scheme's port counts", url: "https://ports.example.com/x", want: "port443"},
		{name: "another port falls back to any port", url: "http://ports.example.com/x", want: "anyport"},
	}
	build := func(t *testing.T, withDefault bool) (*throttle.Transport, *decisionLog, *sendLog) {
		var sent sendLog
		var decisions decisionLog
		opts := []throttle.Option{decisions.option()}
		for _, r := range rules {
			opts = append(opts, throttle.WithRule(r))
		}
		if withDefault {
			opts = append(opts, throttle.WithDefault(throttle.Rule{Limits: lim}))
		}
		return newTransport(t, sent.base(), nil, opts...), &decisions, &sent
	}
	for _, tc := range tests {
		for _, withDefault := range []bool{true, false} {
			name := tc.name + "/with default"
			want := tc.want
			if !withDefault {
				name = tc.name + "/without default"
				if want == "default" {
					want = tc.noDef
				}
			}
			t.Run(name, func(t *testing.T) {
				tr, decisions, sent := build(t, withDefault)
				method := tc.method
				if method == "" {
					method = http.MethodGet
				}
				req, _ := newRequest(t, context.Background(), method, tc.url)
				if tc.host != "" {
					req.URL.Host, req.Host = "", tc.host
				}
				_, err := tr.RoundTrip(req)
				require.NoError(t, err)
				assert.Equal(t, 1, sent.count())
				d := decisions.last(t)
				assert.Equal(t, want, d.Rule)
				if want == "" {
					assert.Equal(t, throttle.Unmatched, d.Outcome)
					assert.Empty(t, d.Key)
				} else {
					assert.Equal(t, throttle.Sent, d.Outcome)
				}
			})
		}
	}
}

// TestConfigValidation checks that New refuses every bad configuration with
// a *ConfigError that says what is wrong.
func TestConfigValidation(t *testing.T) {
	lim := []throttle.Limit{throttle.PerSecond(10)}
	ok := throttle.Rule{Host: "api.example.com", Limits: lim}
	with := func(f func(r *throttle.Rule)) throttle.Option {
		r := ok
		f(&r)
		return throttle.WithRule(r)
	}
	mem := newMemory(t)
	tests := []struct {
		name string
		st   store.Store // nil: mem
		base http.RoundTripper
		opts []throttle.Option
		// nilStore passes a nil store.
		nilStore bool
		want     string // a fragment of the error; "" means valid
	}{
		{name: "valid", opts: []throttle.Option{throttle.WithRule(ok)}},
		{name: "valid default only", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{Limits: lim})}},
		{name: "valid NoMargin", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Margin = throttle.NoMargin })}},
		{name: "valid FailFast", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Mode = throttle.FailFast })}},
		{name: "valid Per 1ms", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(1, time.Millisecond)} })}},
		{name: "nil store", nilStore: true, opts: []throttle.Option{throttle.WithRule(ok)}, want: "nil store"},
		{name: "no rules", want: "no rules"},
		{name: "empty Host", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "" })}, want: "Host is empty"},
		{name: "Host as a URL", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "https://api.example.com" })}, want: "not a URL"},
		{name: "Host with a path", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "api.example.com/v1" })}, want: "not a URL"},
		{name: "wildcard inside", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "api.*.com" })}, want: "a wildcard must be"},
		{name: "wildcard without dot", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "*example.com" })}, want: "a wildcard must be"},
		{name: "wildcard alone", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "*." })}, want: "a wildcard must be"},
		{name: "PathPrefix without slash", opts: []throttle.Option{with(func(r *throttle.Rule) { r.PathPrefix = "v1" })}, want: "must start with /"},
		{name: "default with Host", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{Host: "a.example.com", Limits: lim})}, want: "takes no Host"},
		{name: "default with PathPrefix", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{PathPrefix: "/v1", Limits: lim})}, want: "takes no Host"},
		{name: "default with Method", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{Method: "GET", Limits: lim})}, want: "takes no Host"},
		{name: "WithDefault twice", opts: []throttle.Option{
			throttle.WithDefault(throttle.Rule{Limits: lim}), throttle.WithDefault(throttle.Rule{Limits: lim}),
		}, want: "WithDefault given twice"},
		{name: "no limits", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = nil })}, want: "no Limits"},
		{name: "N zero", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.PerSecond(0)} })}, want: "N must be at least 1"},
		{name: "N negative", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{throttle.PerSecond(5), throttle.PerHour(-1)}
		})}, want: "limit 1 (-1/1h0m0s): N must be at least 1"},
		{name: "Per below 1ms", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(1, 999*time.Microsecond)} })}, want: "Per must be from 1ms"},
		{name: "Per zero", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{{N: 1}} })}, want: "Per must be from 1ms"},
		{name: "Per above MaxPer", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(1, throttle.MaxPer+1)} })}, want: "Per must be from 1ms"},
		{name: "valid Per MaxPer", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(1, throttle.MaxPer)} })}},
		{name: "Margin above a minute", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Margin = time.Hour })}, want: "Margin 1h0m0s is above"},
		{name: "same name, other limits", opts: []throttle.Option{
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example", Limits: lim}),
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "b.example", Limits: []throttle.Limit{throttle.PerSecond(11)}}),
		}, want: "must have the same Limits"},
		{name: "valid same name, same limits", opts: []throttle.Option{
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example", Limits: lim}),
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "b.example", Limits: lim}),
		}},
		{name: "valid buckets", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Algorithm, r.Limits = throttle.Buckets, []throttle.Limit{{N: 1_000_000, Per: 24 * time.Hour, Precision: time.Hour}}
		})}},
		{name: "valid counter", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Algorithm = throttle.SlidingCounter })}},
		{name: "Precision on the log", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{{N: 10, Per: time.Second, Precision: 100 * time.Millisecond}}
		})}, want: "Precision is for the buckets algorithm, not log"},
		{name: "too many buckets", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Algorithm, r.Limits = throttle.Buckets, []throttle.Limit{{N: 10, Per: time.Hour, Precision: 100 * time.Millisecond}}
		})}, want: "36001 buckets, more than 4096"},
		{name: "unknown Algorithm", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Algorithm = throttle.Algorithm(8) })}, want: "unknown algorithm 8"},
		{name: "same name, other algorithm", opts: []throttle.Option{
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example", Limits: lim}),
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "b.example", Limits: lim, Algorithm: throttle.FixedWindow}),
		}, want: "must have the same Limits, Margin and Algorithm"},
		{name: "negative MaxWait", opts: []throttle.Option{with(func(r *throttle.Rule) { r.MaxWait = -time.Second })}, want: "negative MaxWait"},
		{name: "MaxWait with FailFast", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Mode, r.MaxWait = throttle.FailFast, time.Second
		})}, want: "MaxWait is set but Mode is FailFast"},
		{name: "negative Margin", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Margin = -2 })}, want: "negative Margin"},
		{name: "very negative Margin", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Margin = -time.Second })}, want: "negative Margin"},
		{name: "unknown Mode", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Mode = throttle.Mode(7) })}, want: "unknown Mode 7"},
		{name: "nil option", opts: []throttle.Option{throttle.WithRule(ok), nil}, want: "nil option"},
		{name: "nil hook", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithOnDecision(nil)}, want: "WithOnDecision: nil function"},
		{name: "nil logger", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithLogger(nil)}, want: "WithLogger: nil logger"},
		{name: "unknown StoreFailure", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.StoreFailure(9))}, want: "unknown StoreFailure 9"},
		{name: "negative StoreFailure", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.StoreFailure(-1))}, want: "unknown StoreFailure -1"},
		{name: "typed nil store", st: (*store.Memory)(nil), opts: []throttle.Option{throttle.WithRule(ok)}, want: "nil store"},
		{name: "typed nil Redis store", st: (*store.Redis)(nil), opts: []throttle.Option{throttle.WithRule(ok)}, want: "nil store"},
		{name: "typed nil base", base: (*http.Transport)(nil), opts: []throttle.Option{throttle.WithRule(ok)}, want: "base is a nil *http.Transport"},
		{name: "nil func base", base: roundTripperFunc(nil), opts: []throttle.Option{throttle.WithRule(ok)}, want: "base is a nil throttle_test.roundTripperFunc"},
		{name: "valid FailOpen", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailOpen)}},
		{name: "valid FailLocal", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailLocal), throttle.WithLocalShare(0.25)}},
		{name: "valid FailLocal share 1, given first", opts: []throttle.Option{throttle.WithLocalShare(1), throttle.WithStoreFailure(throttle.FailLocal), throttle.WithRule(ok)}},
		{name: "FailLocal without share", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailLocal)}, want: "FailLocal needs WithLocalShare"},
		{name: "share without FailLocal", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithLocalShare(0.5)}, want: "WithLocalShare needs WithStoreFailure(FailLocal)"},
		{name: "share with FailOpen", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailOpen), throttle.WithLocalShare(0.5)}, want: "WithLocalShare needs WithStoreFailure(FailLocal)"},
		{name: "share zero", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailLocal), throttle.WithLocalShare(0)}, want: "WithLocalShare(0): the share must be above 0 and at most 1"},
		{name: "share negative", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailLocal), throttle.WithLocalShare(-0.5)}, want: "WithLocalShare(-0.5)"},
		{name: "share above 1", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailLocal), throttle.WithLocalShare(1.5)}, want: "WithLocalShare(1.5)"},
		{name: "share NaN", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailLocal), throttle.WithLocalShare(math.NaN())}, want: "WithLocalShare(NaN)"},
		{name: "share infinite", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreFailure(throttle.FailLocal), throttle.WithLocalShare(math.Inf(1))}, want: "WithLocalShare(+Inf)"},
		{name: "valid store timeout", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreTimeout(50 * time.Millisecond)}},
		{name: "zero store timeout", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreTimeout(0)}, want: "WithStoreTimeout(0s): the timeout must be positive"},
		{name: "negative store timeout", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreTimeout(-time.Second)}, want: "WithStoreTimeout(-1s)"},
		{name: "valid key secret", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithKeySecret(make([]byte, throttle.MinKeySecretLen))}},
		{name: "nil key secret", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithKeySecret(nil)}, want: "WithKeySecret: the secret has 0 bytes; it needs at least 16"},
		{name: "empty key secret", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithKeySecret([]byte{})}, want: "the secret has 0 bytes"},
		{name: "short key secret", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithKeySecret([]byte("hunter2"))}, want: "the secret has 7 bytes"},
		{name: "only a nil option", opts: []throttle.Option{nil}, want: "nil option"},
		{name: "default rule without limits", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{})}, want: `rule "default": no Limits`},
		{name: "second of two rules invalid", opts: []throttle.Option{throttle.WithRule(ok),
			throttle.WithRule(throttle.Rule{Name: "b", Host: "b.example", Limits: []throttle.Limit{throttle.PerSecond(-3)}})}, want: `rule "b": limit 0 (-3/1s): N must be at least 1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st store.Store = mem
			if tc.st != nil {
				st = tc.st
			}
			if tc.nilStore {
				st = nil
			}
			tr, err := throttle.New(tc.base, st, tc.opts...)
			if tc.want == "" {
				require.NoError(t, err)
				assert.NotNil(t, tr)
				return
			}
			require.Error(t, err)
			assert.Nil(t, tr)
			assert.ErrorIs(t, err, throttle.ErrInvalidConfig)
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "throttle: invalid configuration: "), err.Error())
		})
	}
}

// TestAlgorithmRule checks that a rule's Algorithm reaches the store: a
// fixed window admits 2N across its edge where the log refuses.
func TestAlgorithmRule(t *testing.T) {
	for _, tc := range []struct {
		alg  throttle.Algorithm
		sent int
	}{{throttle.SlidingLog, 2}, {throttle.FixedWindow, 4}} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0).Add(900 * time.Millisecond)
			var mu sync.Mutex
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			st, err := store.NewMemory(store.WithClock(clock))
			require.NoError(t, err)
			var sent sendLog
			tr := newTransport(t, sent.base(), st, throttle.WithRule(throttle.Rule{
				Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(2)},
				Margin: throttle.NoMargin, Mode: throttle.FailFast, Algorithm: tc.alg,
			}))
			try := func() {
				req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
				if resp, err := tr.RoundTrip(req); err == nil {
					resp.Body.Close()
				} else {
					require.ErrorIs(t, err, throttle.ErrLimited)
				}
			}
			try()
			try()
			mu.Lock()
			now = now.Add(100 * time.Millisecond) // a new aligned second
			mu.Unlock()
			try()
			try()
			assert.Equal(t, tc.sent, sent.count())
		})
	}
}

// TestConfigErrorNamesRule checks that rule errors carry the rule's name.
func TestConfigErrorNamesRule(t *testing.T) {
	tests := []struct {
		name string
		opt  throttle.Option
		want string
	}{
		{name: "explicit name", opt: throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example.com"}), want: "gw"},
		{name: "derived name", opt: throttle.WithRule(throttle.Rule{Host: "a.example.com", Method: "POST", PathPrefix: "/v1"}), want: "POST a.example.com/v1"},
		{name: "default", opt: throttle.WithDefault(throttle.Rule{}), want: "default"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := throttle.New(nil, newMemory(t), tc.opt)
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.want, ce.Rule)
		})
	}
}

// TestStoreFailure checks both store failure policies.
func TestStoreFailure(t *testing.T) {
	errBoom := errors.New("dial tcp 10.0.0.1:6379: connection refused")
	rule := throttle.WithRule(throttle.Rule{Name: "r", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(1)}})

	t.Run("fail closed", func(t *testing.T) {
		var sent sendLog
		var decisions decisionLog
		tr := newTransport(t, sent.base(), errStore{errBoom}, rule, decisions.option())
		req, body := newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err := tr.RoundTrip(req)
		require.Error(t, err)
		assert.ErrorIs(t, err, errBoom)
		assert.NotErrorIs(t, err, throttle.ErrLimited)
		assert.True(t, strings.HasPrefix(err.Error(), "throttle: "), err.Error())
		assert.Contains(t, err.Error(), `rule "r"`)
		assert.Zero(t, sent.count())
		assert.Equal(t, int32(1), body.closes.Load())
		d := decisions.last(t)
		assert.Equal(t, throttle.Failed, d.Outcome)
		assert.Equal(t, err, d.Err)

		// Through http.Client too.
		req, _ = newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err = (&http.Client{Transport: tr}).Do(req)
		assert.ErrorIs(t, err, errBoom)
		assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
		var se *throttle.StoreError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "r", se.Rule)
		assert.True(t, se.NotTried, "the store was marked down by the first request")
	})

	t.Run("fail open", func(t *testing.T) {
		var sent sendLog
		var decisions decisionLog
		tr := newTransport(t, sent.base(), errStore{errBoom}, rule, decisions.option(),
			throttle.WithStoreFailure(throttle.FailOpen))
		for range 3 {
			send(t, tr, testURL)
		}
		assert.Equal(t, 3, sent.count())
		d := decisions.last(t)
		assert.Equal(t, throttle.FailedOpen, d.Outcome)
		assert.ErrorIs(t, d.Err, errBoom)
		assert.Equal(t, "r", d.Rule)
		assert.Equal(t, "host:api.example.com", d.Key)
	})

	t.Run("canceled context is not a store failure", func(t *testing.T) {
		// A store that fails because the context ended: the caller gets the
		// context's error, even when failing open.
		ctx, cancel := context.WithCancel(context.Background())
		st := ctxStore{cancel: cancel}
		var sent sendLog
		var decisions decisionLog
		tr := newTransport(t, sent.base(), st, rule, decisions.option(), throttle.WithStoreFailure(throttle.FailOpen))
		req, body := newRequest(t, ctx, http.MethodGet, testURL)
		_, err := tr.RoundTrip(req)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Zero(t, sent.count())
		assert.Equal(t, int32(1), body.closes.Load())
		assert.Equal(t, throttle.Canceled, decisions.last(t).Outcome)
	})
}

// ctxStore cancels the caller's context during Reserve and fails with its error.
type ctxStore struct{ cancel context.CancelFunc }

func (s ctxStore) Reserve(ctx context.Context, _ string, _ store.Request) (store.Reservation, error) {
	s.cancel()
	<-ctx.Done()
	return store.Reservation{}, ctx.Err()
}
func (s ctxStore) Cancel(context.Context, store.Reservation) error { return nil }

// TestHooksAndLogsHoldNoSecret drives every outcome through a transport with
// a decision hook and a logger, and checks that neither, nor any error, holds
// the token the requests carry.
func TestHooksAndLogsHoldNoSecret(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		var decisions decisionLog
		var sent sendLog
		lim := []throttle.Limit{throttle.Per(1, time.Second)}
		tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithLogger(logger),
			throttle.WithRule(throttle.Rule{Name: "bearer", Host: "api.example.com", Limits: lim, Key: throttle.ByBearerToken()}),
			throttle.WithRule(throttle.Rule{Name: "query", Host: "graph.example.com", Limits: lim, Key: throttle.ByQuery("access_token"),
				Mode: throttle.FailFast}),
			throttle.WithRule(throttle.Rule{Name: "header", Host: "h.example.com", Limits: lim, Key: throttle.ByHeader("X-Api-Key")}),
			throttle.WithRule(throttle.Rule{Name: "long", Host: "long.example.com", Limits: lim,
				Key: func(r *http.Request) (string, error) {
					return strings.Repeat("k", throttle.MaxKeyLen) + r.Header.Get("Authorization"), nil
				}}),
			throttle.WithRule(throttle.Rule{Name: "cost", Host: "cost.example.com", Limits: lim,
				Cost: func(*http.Request) int { return 2 }}),
		)
		var errs []error
		do := func(ctx context.Context, method, rawURL string, mutate func(*http.Request)) {
			req, _ := newRequest(t, ctx, method, rawURL)
			req.Header.Set("X-Api-Key", secret)
			if mutate != nil {
				mutate(req)
			}
			if _, err := tr.RoundTrip(req); err != nil {
				errs = append(errs, err)
			}
		}
		q := "?access_token=" + secret
		bg := context.Background()
		do(bg, "GET", "https://api.example.com/a"+q, nil)                    // sent
		do(bg, "GET", "https://graph.example.com/a"+q, nil)                  // sent
		do(bg, "GET", "https://graph.example.com/a"+q, nil)                  // limited
		do(bg, "GET", "https://h.example.com/a"+q, nil)                      // sent
		do(bg, "GET", "https://long.example.com/a"+q, nil)                   // sent, hashed key
		do(bg, "GET", "https://cost.example.com/a"+q, nil)                   // invalid cost
		do(bg, "GET", "https://other.example.com/a"+q, nil)                  // unmatched
		do(bg, "GET", "https://api.example.com/a"+q, func(r *http.Request) { // no key: not bearer
			r.Header.Set("Authorization", "Basic "+secret)
		})
		do(bg, "GET", "https://h.example.com/a"+q, func(r *http.Request) { r.Header.Del("X-Api-Key") }) // no key
		ctx, cancel := context.WithCancel(bg)
		timer := time.AfterFunc(100*time.Millisecond, cancel)
		do(ctx, "GET", "https://api.example.com/a"+q, nil) // canceled while waiting
		timer.Stop()
		ctx, cancel = context.WithTimeout(bg, 10*time.Millisecond)
		do(ctx, "GET", "https://api.example.com/a"+q, nil) // limited by the deadline
		cancel()

		failing := newTransport(t, sent.base(), errStore{errors.New("store down")}, decisions.option(), throttle.WithLogger(logger),
			throttle.WithRule(throttle.Rule{Name: "fo", Host: "api.example.com", Limits: lim, Key: throttle.ByBearerToken()}),
			throttle.WithStoreFailure(throttle.FailOpen))
		req, _ := newRequest(t, bg, "GET", "https://api.example.com/a"+q)
		_, err := failing.RoundTrip(req)
		require.NoError(t, err) // failed open

		all := decisions.all()
		seen := map[throttle.Outcome]int{}
		for _, d := range all {
			seen[d.Outcome]++
			assert.NotContains(t, d.Key, secret)
			assert.NotContains(t, d.Rule, secret)
			if d.Err != nil {
				assert.NotContains(t, d.Err.Error(), secret)
			}
			if d.Outcome != throttle.Unmatched {
				assert.NotEmpty(t, d.Rule)
			}
		}
		assert.Equal(t, map[throttle.Outcome]int{
			throttle.Sent: 4, throttle.Limited: 2, throttle.Canceled: 1,
			throttle.Failed: 3, throttle.FailedOpen: 1, throttle.Unmatched: 1,
		}, seen)
		require.Len(t, errs, 6)
		for _, err := range errs {
			assert.NotContains(t, err.Error(), secret)
		}
		out := logs.String()
		assert.NotContains(t, out, secret)
		assert.NotContains(t, out, "tok-")
		for _, want := range []string{
			"level=DEBUG msg=\"throttle decision\" rule=bearer key=bearer:",
			"outcome=sent", "outcome=limited", "outcome=canceled", "outcome=failed ",
			"outcome=failed_open", "outcome=unmatched", "retry_after=", "limit=1/1s",
			"level=INFO", "level=WARN", "key=sha256:",
		} {
			assert.Contains(t, out, want)
		}
		assert.Equal(t, len(all), strings.Count(out, "msg=\"throttle decision\""), "one line per decision")
	})
}

// TestLoggerLevel checks that a logger above Debug hears only refusals and
// failures.
func TestLoggerLevel(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var sent sendLog
	tr := newTransport(t, sent.base(), nil, throttle.WithLogger(logger), throttle.WithRule(throttle.Rule{
		Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)}, Mode: throttle.FailFast,
	}))
	send(t, tr, testURL)
	assert.Empty(t, logs.String())
	req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
	_, err := tr.RoundTrip(req)
	require.ErrorIs(t, err, throttle.ErrLimited)
	assert.Equal(t, 1, strings.Count(logs.String(), "\n"))
	assert.Contains(t, logs.String(), "level=INFO")
	assert.Contains(t, logs.String(), "outcome=limited")
}

// TestDecisionHookSeesEveryField checks a hook's view of one delayed send.
func TestDecisionHookSeesEveryField(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var decisions decisionLog
		var sent sendLog
		lim := throttle.Per(4, time.Second)
		tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
			Name: "gw", Host: "api.example.com", Limits: []throttle.Limit{lim}, Key: throttle.Fixed("acme"),
			Cost: func(*http.Request) int { return 2 }, Margin: throttle.NoMargin,
		}))
		send(t, tr, testURL)
		send(t, tr, testURL)
		send(t, tr, testURL)
		assert.Equal(t, []throttle.Decision{
			{Rule: "gw", Key: "acme", Cost: 2, Outcome: throttle.Sent},
			{Rule: "gw", Key: "acme", Cost: 2, Outcome: throttle.Sent},
			{Rule: "gw", Key: "acme", Cost: 2, Outcome: throttle.Sent, Delay: time.Second, Limit: lim},
		}, decisions.all())
	})
}

// TestOutcomeString checks the names of outcomes.
func TestOutcomeString(t *testing.T) {
	tests := []struct {
		o    throttle.Outcome
		want string
	}{
		{throttle.Sent, "sent"}, {throttle.Limited, "limited"}, {throttle.Canceled, "canceled"},
		{throttle.Failed, "failed"}, {throttle.FailedOpen, "failed_open"}, {throttle.Unmatched, "unmatched"},
		{throttle.Outcome(-1), "unknown"}, {throttle.Outcome(99), "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) { assert.Equal(t, tc.want, tc.o.String()) })
	}
}

// TestLimitConstructors checks the readable constructors.
func TestLimitConstructors(t *testing.T) {
	assert.Equal(t, throttle.Limit{N: 10, Per: time.Second}, throttle.PerSecond(10))
	assert.Equal(t, throttle.Limit{N: 60, Per: time.Minute}, throttle.PerMinute(60))
	assert.Equal(t, throttle.Limit{N: 5000, Per: time.Hour}, throttle.PerHour(5000))
	assert.Equal(t, throttle.Limit{N: 3, Per: 250 * time.Millisecond}, throttle.Per(3, 250*time.Millisecond))
	assert.Equal(t, "5000/1h0m0s", throttle.PerHour(5000).String())
}

// TestNilBaseIsDefaultTransport checks that a nil base is accepted; the
// request is refused before any I/O, so no network is needed.
func TestNilBaseIsDefaultTransport(t *testing.T) {
	tr, err := throttle.New(nil, newMemory(t), throttle.WithRule(throttle.Rule{
		Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)}, Key: throttle.ByHeader("X-None"),
	}))
	require.NoError(t, err)
	req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, throttle.ErrNoKey)
}

// sendRecord is one request as the fake upstream saw it.
type sendRecord struct {
	at     time.Time
	key    string
	cost   int
	worker int
}

// fleetPlan is a random workload: the limits of one rule, and what each
// worker sends.
type fleetPlan struct {
	limits  []throttle.Limit
	maxWait time.Duration
	workers [][]planned
}

type planned struct {
	pause       time.Duration // before the request
	cost        int
	tenant      string
	timeout     time.Duration // context deadline, if > 0
	cancelAfter time.Duration // context cancelled after this, if > 0
}

// randomPlan draws a workload from rng; every duration is a whole number of
// milliseconds so that send times and slots agree to the nanosecond.
func randomPlan(rng *rand.Rand, workers, perWorker int) fleetPlan {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	var p fleetPlan
	for range 1 + rng.IntN(3) {
		p.limits = append(p.limits, throttle.Per(3+rng.IntN(18), ms(10, 2000)))
	}
	p.maxWait = ms(50, 5000)
	tenants := []string{"acme", "globex"}
	for range workers {
		var w []planned
		for range perWorker {
			q := planned{pause: ms(0, 300), cost: 1 + rng.IntN(3), tenant: tenants[rng.IntN(len(tenants))]}
			switch r := rng.IntN(10); {
			case r == 0:
				q.timeout = ms(1, 1000)
			case r == 1:
				q.cancelAfter = ms(1, 1000)
			}
			w = append(w, q)
		}
		p.workers = append(p.workers, w)
	}
	return p
}

// runFleet sends p through one Transport on the memory store, in a synctest
// bubble, with the given limits and margin, and returns what the upstream
// received.
func runFleet(t *testing.T, p fleetPlan, limits []throttle.Limit, margin time.Duration) []sendRecord {
	var (
		mu    sync.Mutex
		sends []sendRecord
	)
	synctest.Test(t, func(t *testing.T) {
		base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			cost, err := strconv.Atoi(r.Header.Get("X-Cost"))
			if err != nil {
				return nil, err
			}
			worker, err := strconv.Atoi(r.Header.Get("X-Worker"))
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			sends = append(sends, sendRecord{at: time.Now(), key: r.Header.Get("X-Tenant"), cost: cost, worker: worker})
			return okResponse(r), nil
		})
		tr := newTransport(t, base, nil, throttle.WithRule(throttle.Rule{
			Host: "api.example.com", Limits: limits, Key: throttle.ByHeader("X-Tenant"),
			Cost: func(r *http.Request) int {
				n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
				return n
			},
			MaxWait: p.maxWait, Margin: margin,
		}))
		var wg sync.WaitGroup
		for i, w := range p.workers {
			wg.Go(func() {
				for _, q := range w {
					time.Sleep(q.pause)
					ctx, cancel := context.WithCancel(context.Background())
					if q.timeout > 0 {
						ctx, cancel = context.WithTimeout(ctx, q.timeout)
					}
					if q.cancelAfter > 0 {
						timer := time.AfterFunc(q.cancelAfter, cancel)
						defer timer.Stop()
					}
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/x", http.NoBody)
					if err != nil {
						panic(err)
					}
					req.Header.Set("X-Tenant", q.tenant)
					req.Header.Set("X-Cost", strconv.Itoa(q.cost))
					req.Header.Set("X-Worker", strconv.Itoa(i))
					_, err = tr.RoundTrip(req)
					cancel()
					if err != nil && !errors.Is(err, throttle.ErrLimited) && !errors.Is(err, context.Canceled) &&
						!errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("worker %d: unexpected error %v", i, err)
					}
				}
			})
		}
		wg.Wait()
	})
	return sends
}

// overfilled returns a description of every window (t-w, t] of sends, per
// key, that holds more than n units.
func overfilled(sends []sendRecord, n int, w time.Duration) []string {
	byKey := map[string][]sendRecord{}
	for _, s := range sends {
		byKey[s.key] = append(byKey[s.key], s)
	}
	var bad []string
	for key, ss := range byKey {
		slices.SortFunc(ss, func(a, b sendRecord) int { return a.at.Compare(b.at) })
		// Only windows ending at a send time can hold a maximum.
		for i := range ss {
			end := ss[i].at
			units := 0
			for _, s := range ss {
				if s.at.After(end.Add(-w)) && !s.at.After(end) {
					units += s.cost
				}
			}
			if units > n {
				bad = append(bad, fmt.Sprintf("key %s: %d units in (%s, %s]", key, units,
					end.Add(-w).Format("15:04:05.000000"), end.Format("15:04:05.000000")))
			}
		}
	}
	return bad
}

// TestPropertyNoWindowOverfilled is the guarantee, tested: whatever the
// limits, costs, timing and cancellations, no window of any limit ever holds
// more than its N units at the upstream.
func TestPropertyNoWindowOverfilled(t *testing.T) {
	margins := []struct {
		name   string
		margin time.Duration // the Rule's Margin
		extra  time.Duration // what it adds to every window
	}{
		{name: "no margin", margin: throttle.NoMargin},
		{name: "default margin", margin: 0, extra: throttle.DefaultMargin},
	}
	for _, m := range margins {
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("%s/seed %d", m.name, seed), func(t *testing.T) {
				t.Logf("seed %d", seed)
				p := randomPlan(rand.New(rand.NewPCG(seed, 0x7468726f74746c65)), 50, 4)
				t.Logf("limits %v, MaxWait %s", p.limits, p.maxWait)
				sends := runFleet(t, p, p.limits, m.margin)
				require.NotEmpty(t, sends)
				for _, l := range p.limits {
					// The margin widens every window: the guarantee holds
					// for W + margin, hence for W.
					bad := overfilled(sends, l.N, l.Per+m.extra)
					assert.Empty(t, bad, "limit %s", l)
				}
			})
		}
	}

	// The check has teeth: the same workloads through a transport whose
	// every limit allows one unit more are caught. It also caught the store
	// of commit 00ec52d, whose count trim let a Cancel free a unit still
	// inside a window ("no margin/seed 4": 22 units in a window of 15).
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("weakened limit is caught/seed %d", seed), func(t *testing.T) {
			p := randomPlan(rand.New(rand.NewPCG(seed, 0x7468726f74746c65)), 50, 4)
			weak := slices.Clone(p.limits)
			for i := range weak {
				weak[i].N++
			}
			sends := runFleet(t, p, weak, throttle.NoMargin)
			var bad []string
			for _, l := range p.limits {
				bad = append(bad, overfilled(sends, l.N, l.Per)...)
			}
			assert.NotEmpty(t, bad, "limits %v: N+1 sends went unnoticed", p.limits)
		})
	}
}

// TestRulesKeepTheirOwnLogs: two rules whose KeyFuncs derive the same key (the
// default ByHost on two paths of one host) count separately, and the short
// window of one never trims the long window of the other; rules of the same
// name share one log on purpose.
func TestRulesKeepTheirOwnLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		tr := newTransport(t, sent.base(), nil,
			throttle.WithRule(throttle.Rule{Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(3)}, Mode: throttle.FailFast}),
			throttle.WithRule(throttle.Rule{Host: "api.example.com", PathPrefix: "/search", Limits: []throttle.Limit{throttle.PerSecond(1)}, Mode: throttle.FailFast}),
			throttle.WithRule(throttle.Rule{Name: "shared", Host: "a.example", Key: throttle.Fixed("acct"), Limits: []throttle.Limit{throttle.PerHour(1)}, Mode: throttle.FailFast}),
			throttle.WithRule(throttle.Rule{Name: "shared", Host: "b.example", Key: throttle.Fixed("acct"), Limits: []throttle.Limit{throttle.PerHour(1)}, Mode: throttle.FailFast}),
		)
		get := func(url string) error {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		for i := range 10 {
			assert.NoError(t, get("https://api.example.com/search?q=1"), "search %d", i)
			if i < 3 {
				assert.NoError(t, get("https://api.example.com/items"), "items %d", i)
			}
			time.Sleep(time.Second + throttle.DefaultMargin)
		}
		assert.ErrorIs(t, get("https://api.example.com/items"), throttle.ErrLimited,
			"the hourly rule's log outlives the secondly rule's traffic on the same host")
		assert.NoError(t, get("https://a.example/x"))
		assert.ErrorIs(t, get("https://b.example/x"), throttle.ErrLimited, "rules named alike share one log")
	})
}

// TestIPv6Hosts: a literal IPv6 host is one key with or without its port, and
// a rule for it matches either way.
func TestIPv6Hosts(t *testing.T) {
	kf := throttle.ByHost()
	for _, u := range []string{"https://[2001:DB8::1]/x", "https://[2001:db8::1]:443/x", "http://[2001:db8::1]:8080/"} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		k, err := kf(req)
		require.NoError(t, err)
		assert.Equal(t, "host:2001:db8::1", k, u)
	}
	var sent sendLog
	tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
		Host: "[2001:db8::1]", Limits: []throttle.Limit{throttle.PerHour(1)}, Mode: throttle.FailFast}))
	var errs []error
	for _, u := range []string{"https://[2001:db8::1]/x", "https://[2001:db8::1]:443/x", "https://[2001:db8::1]/y"} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		errs = append(errs, err)
	}
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], throttle.ErrLimited)
	assert.ErrorIs(t, errs[2], throttle.ErrLimited)
	assert.Equal(t, 1, sent.count())
}
