package throttle_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/store"
)

// TestRoundTripPaths walks every path of RoundTrip and checks, on each, that
// the caller's request is never mutated, that the body is closed exactly when
// the base is not called, and what the caller and the hook are told.
func TestRoundTripPaths(t *testing.T) {
	t.Parallel()
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
		wantAs      func(error) bool // for an error without a sentinel
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
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k"), FailFast: true},
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
			wantAs:      isA[*throttle.KeyError],
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
			st:          failingStore(errBoom),
			wantErr:     errBoom,
			wantOutcome: throttle.Failed,
		},
		{
			name:        "store error, fail open",
			rule:        throttle.Rule{Host: "api.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			opts:        []throttle.Option{throttle.WithFailOpen()},
			st:          failingStore(errBoom),
			wantBase:    true,
			wantOutcome: throttle.FailedOpen,
		},
		{
			name:        "unmatched: refused (the default)",
			rule:        throttle.Rule{Host: "other.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			wantAs:      isA[*throttle.UnmatchedError],
			wantOutcome: throttle.Unmatched,
		},
		{
			name:        "unmatched: sent (WithUnmatchedSent)",
			rule:        throttle.Rule{Host: "other.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			opts:        []throttle.Option{throttle.WithUnmatchedSent(false)},
			wantBase:    true,
			wantOutcome: throttle.Unmatched,
		},
		{
			name:        "unmatched: sent, with a warning",
			rule:        throttle.Rule{Host: "other.example.com", Limits: perTick, Key: throttle.Fixed("k")},
			opts:        []throttle.Option{throttle.WithUnmatchedSent(true), throttle.WithLogger(slog.New(slog.DiscardHandler))},
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
					// The caller's request itself, or a shallow copy whose
					// context carries the trace that measures lateness.
					got := sent.reqs[tc.prime]
					assert.Same(t, req.URL, got.URL)
					assert.Equal(t, req.Header, got.Header)
					assert.Same(t, req.Body, got.Body)
					assert.Zero(t, body.closes.Load(), "the body belongs to the base once it is called")
					assert.Equal(t, tc.wantDelay, took)
					return
				}
				require.Error(t, err)
				assert.Nil(t, resp)
				if tc.wantAs != nil {
					assert.True(t, tc.wantAs(err), "%T: %v", err, err)
				} else {
					assert.ErrorIs(t, err, tc.wantErr)
				}
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
	t.Parallel()
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
	t.Parallel()
	limit := throttle.Per(2, time.Hour)
	newClient := func(t *testing.T, r throttle.Rule) (*http.Client, *sendLog) {
		var sent sendLog
		return &http.Client{Transport: newTransport(t, sent.base(), nil, throttle.WithRule(r))}, &sent
	}

	t.Run("limited", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, sent := newClient(t, throttle.Rule{Name: "gw", Host: "api.example.com", Limits: []throttle.Limit{limit},
				Key: throttle.ByBearerToken(), FailFast: true})
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
			assert.False(t, isA[*throttle.KeyError](err))
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

// TestStoreFailure checks both store failure policies.
func TestStoreFailure(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("dial tcp 10.0.0.1:6379: connection refused")
	rule := throttle.WithRule(throttle.Rule{Name: "r", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(1)}})

	t.Run("fail closed", func(t *testing.T) {
		var sent sendLog
		var decisions decisionLog
		tr := newTransport(t, sent.base(), failingStore(errBoom), rule, decisions.option())
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
		tr := newTransport(t, sent.base(), failingStore(errBoom), rule, decisions.option(),
			throttle.WithFailOpen())
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
		st := fakestore.New()
		st.OnReserve(func(ctx context.Context) { cancel(); <-ctx.Done() })
		var sent sendLog
		var decisions decisionLog
		tr := newTransport(t, sent.base(), st, rule, decisions.option(), throttle.WithFailOpen())
		req, body := newRequest(t, ctx, http.MethodGet, testURL)
		_, err := tr.RoundTrip(req)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Zero(t, sent.count())
		assert.Equal(t, int32(1), body.closes.Load())
		assert.Equal(t, throttle.Canceled, decisions.last(t).Outcome)
	})
}

// TestNilBaseIsDefaultTransport checks that a nil base is accepted; the
// request is refused before any I/O, so no network is needed.
func TestNilBaseIsDefaultTransport(t *testing.T) {
	t.Parallel()
	tr, err := throttle.New(nil, newMemory(t), throttle.WithRule(throttle.Rule{
		Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)}, Key: throttle.ByHeader("X-None"),
	}))
	require.NoError(t, err)
	req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
	_, err = tr.RoundTrip(req)
	assert.True(t, isA[*throttle.KeyError](err), "%v", err)
}

// idleCloser is a base transport that counts calls of CloseIdleConnections.
type idleCloser struct {
	http.RoundTripper
	closed atomic.Int32
}

func (c *idleCloser) CloseIdleConnections() { c.closed.Add(1) }

// TestCloseIdleConnections: http.Client.CloseIdleConnections reaches the base
// transport through the Transport.
func TestCloseIdleConnections(t *testing.T) {
	t.Parallel()
	base := &idleCloser{RoundTripper: roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil })}
	tr := newTransport(t, base, newMemory(t), throttle.WithRule(throttle.Rule{Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)}}))
	(&http.Client{Transport: tr}).CloseIdleConnections()
	assert.Equal(t, int32(1), base.closed.Load())
	// A base without the method: nothing to do, nothing breaks.
	tr = newTransport(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil }), newMemory(t),
		throttle.WithRule(throttle.Rule{Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)}}))
	tr.CloseIdleConnections()
}

// TestUnmatchedResponsesAreCounted: a 429 to a request that no rule matches
// is still counted in RuleStats.Upstream.
func TestUnmatchedResponsesAreCounted(t *testing.T) {
	t.Parallel()
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusTooManyRequests, Body: http.NoBody, Request: r}, nil
	})
	tr := newTransport(t, base, newMemory(t), throttle.WithUnmatchedSent(false),
		throttle.WithRule(throttle.Rule{Host: "other.example.com", Limits: []throttle.Limit{throttle.PerHour(1)}}))
	req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, uint64(1), tr.Stats().Total().Upstream.TooManyRequests)
}
