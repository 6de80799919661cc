package throttle_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
)

func retrying(n int, mut func(*throttle.Rule)) throttle.Option {
	return rule(func(r *throttle.Rule) {
		r.Retries = n
		if mut != nil {
			mut(r)
		}
	})
}

func TestRetryIdempotent(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "slow down", "Retry-After", "1"), ok200}}
		var decisions decisionLog
		tr := newTransport(t, up, nil, retrying(2, nil), decisions.option())
		req, err := http.NewRequest(http.MethodGet, "https://api.example.com/v1/items", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		before := req.Clone(context.Background())
		var resp *http.Response
		assert.Equal(t, time.Second, elapsed(func() { resp, err = tr.RoundTrip(req) }), "the server's wait")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, 2, up.count())
		assert.Equal(t, 1, up.closed[0].n(), "the discarded 429's body is closed")
		assert.NotSame(t, req, up.reqs[1], "the retry is a clone")
		assert.Equal(t, before.Header, req.Header, "the caller's request is unchanged")
		assert.Equal(t, before.URL, req.URL)
		var attempts []int
		for _, d := range decisions.all() {
			attempts = append(attempts, d.Attempt)
		}
		assert.Equal(t, []int{0, 1}, attempts)
		assert.Equal(t, uint64(1), tr.Stats().Total().Upstream.TooManyRequests)
	})
}

func TestRetryOnlyWhatIsSafe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		method    string
		body      func() io.Reader
		idemKey   bool
		wantSends int
	}{
		{"POST without Idempotency-Key is never retried", http.MethodPost, func() io.Reader { return strings.NewReader("pay 10 EUR") }, false, 1},
		{"POST with Idempotency-Key is retried, body replayed", http.MethodPost, func() io.Reader { return strings.NewReader("pay 10 EUR") }, true, 2},
		{"PUT with a body GetBody cannot replay is not retried", http.MethodPut, func() io.Reader { return io.MultiReader(strings.NewReader("x")) }, false, 1},
		{"PUT with a replayable body is retried", http.MethodPut, func() io.Reader { return strings.NewReader("x") }, false, 2},
		{"DELETE is retried", http.MethodDelete, nil, false, 2},
		{"PATCH is not", http.MethodPatch, nil, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "1"), ok200}}
				tr := newTransport(t, up, nil, retrying(3, nil))
				var body io.Reader
				if tc.body != nil {
					body = tc.body()
				}
				req, err := http.NewRequest(tc.method, "https://api.example.com/v1/charges", body)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+secret)
				if tc.idemKey {
					req.Header.Set("Idempotency-Key", "order-42")
				}
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				assert.Equal(t, tc.wantSends, up.count())
				if tc.wantSends == 2 {
					assert.Equal(t, http.StatusOK, resp.StatusCode)
					assert.Equal(t, up.bodies[0], up.bodies[1], "the same body, replayed")
				} else {
					assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
				}
			})
		})
	}
}

func TestRetriesRunOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "still busy", "Retry-After", "1")}}
		tr := newTransport(t, up, nil, retrying(3, nil))
		req, err := http.NewRequest(http.MethodGet, "https://api.example.com/v1/items", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the last response")
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "still busy", string(b))
		require.NoError(t, resp.Body.Close())
		require.Equal(t, 4, up.count(), "1 + 3 retries")
		for i := range 3 {
			assert.Equal(t, 1, up.closed[i].n(), "discarded body %d closed", i)
		}
		assert.Equal(t, uint64(4), tr.Stats().Total().Upstream.TooManyRequests)
	})
}

func TestRetryBounded(t *testing.T) {
	t.Parallel()
	t.Run("a wait beyond MaxServerWait is not retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "60"), ok200}}
			tr := newTransport(t, up, nil, retrying(3, func(r *throttle.Rule) { r.MaxServerWait = 10 * time.Second }))
			var resp *http.Response
			var err error
			assert.Zero(t, elapsed(func() { resp, err = do(t, tr, context.Background()) }))
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Equal(t, 1, up.count())
		})
	})
	t.Run("a wait beyond the context's deadline is not retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "5"), ok200}}
			tr := newTransport(t, up, nil, retrying(3, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			resp, err := do(t, tr, ctx)
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Equal(t, 1, up.count())
		})
	})
	t.Run("the context ending during the wait ends the retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "5"), ok200}}
			tr := newTransport(t, up, nil, retrying(3, nil))
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel)
			_, err := do(t, tr, ctx)
			require.ErrorIs(t, err, context.Canceled)
			assert.Equal(t, 1, up.count())
			assert.Equal(t, 1, up.closed[0].n())
		})
	})
	t.Run("with IgnoreUpstream the retry still waits for Retry-After", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "3"), ok200}}
			tr := newTransport(t, up, nil, retrying(1, func(r *throttle.Rule) { r.IgnoreUpstream = true }))
			var resp *http.Response
			var err error
			assert.Equal(t, 3*time.Second, elapsed(func() { resp, err = do(t, tr, context.Background()) }))
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Zero(t, tr.Stats().Total().Upstream.Pauses, "nothing recorded")
		})
	})
	t.Run("without the store's pause the retry sleeps the wait itself", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "2"), ok200}}
			tr := newTransport(t, up, fakestore.New().WithoutFeedback(), retrying(1, nil))
			var resp *http.Response
			var err error
			assert.Equal(t, 2*time.Second, elapsed(func() { resp, err = do(t, tr, context.Background()) }))
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
		})
	})
}

// TestRetryNilBody: a base that answers 429 with a nil Body (http.Client
// tolerates it) is retried without a panic.
func TestRetryNilBody(t *testing.T) {
	t.Parallel()
	calls := 0
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		calls++
		if calls == 1 {
			return &http.Response{StatusCode: http.StatusTooManyRequests, Request: r}, nil
		}
		return okResponse(r), nil
	})
	tr := newTransport(t, base, nil, throttle.WithRule(throttle.Rule{Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(100)}, Retries: 1}))
	req, err := http.NewRequest(http.MethodGet, "https://api.example.com/x", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, calls)
}
