package throttle_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// A rule's Refused makes a response beyond a 429 count and pause the key as
// a 429 would: GitHub's 403s, Google's 200 with OVER_QUERY_LIMIT, AWS's 400
// with an error code. Its NotRefused makes a 429 that is no rate limit
// (Stripe's lock_timeout) an ordinary response.
func TestRefusals(t *testing.T) {
	t.Parallel()
	refused := []throttle.Refusal{
		{Status: 403, Header: "X-RateLimit-Remaining", Value: "0"},
		{Status: 403, Header: "Retry-After"},
		{Status: 200, Body: "OVER_QUERY_LIMIT"},
		{Status: 400, Body: "ThrottlingException"},
		{Body: "RATELIMIT"},
	}
	notRefused := []throttle.Refusal{{Status: 429, Body: "lock_timeout"}}
	tests := []struct {
		name      string
		answer    func(*http.Request) *http.Response
		wantPause time.Duration // zero: not a refusal
	}{
		{"GitHub: 403, remaining 0 until a reset", answer(403, `{"message":"API rate limit exceeded"}`,
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "40"), 40 * time.Second},
		{"GitHub: 403 with Retry-After", answer(403, `{"message":"You have exceeded a secondary rate limit"}`,
			"Retry-After", "60"), time.Minute},
		{"Google: 200 with OVER_QUERY_LIMIT", answer(200, `{"results":[], "status" : "OVER_QUERY_LIMIT"}`,
			"Retry-After", "2"), 2 * time.Second},
		{"AWS: 400 ThrottlingException", answer(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate exceeded"}`,
			"Retry-After", "3"), 3 * time.Second},
		{"Reddit: RATELIMIT in the body of any status", answer(200, `{"json":{"errors":[["RATELIMIT","you are doing that too much","ratelimit"]]}}`,
			"Retry-After", "5"), 5 * time.Second},
		{"a 403 without the header is a 403", answer(403, `{"message":"Bad credentials"}`, "X-RateLimit-Remaining", "12"), 0},
		{"a 200 whose body names the code inside a word", answer(200, `{"status":"NOT_OVER_QUERY_LIMITS"}`), 0},
		{"a 400 without the code", answer(400, `{"__type":"ValidationException"}`, "Retry-After", "3"), 0},
		{"Stripe: a 429 lock_timeout is no rate limit", answer(429, `{"error":{"code":"lock_timeout","type":"invalid_request_error"}}`,
			"Retry-After", "7"), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := &scripted{answers: []func(*http.Request) *http.Response{tc.answer, ok200}}
				var fbs feedbackLog
				tr := newTransport(t, up, nil, fbs.option(), rule(func(r *throttle.Rule) {
					r.Refused, r.NotRefused = refused, notRefused
					r.MaxServerWait, r.MaxWait = time.Hour, time.Hour
				}))
				_, err := do(t, tr, context.Background())
				require.NoError(t, err, "a refusal is a response")
				assert.Equal(t, tc.wantPause, elapsed(func() {
					_, err := do(t, tr, context.Background())
					require.NoError(t, err)
				}), "the next request waits for the pause")
				st := tr.Stats().Total().Upstream
				if tc.wantPause == 0 {
					assert.Zero(t, st.Pauses)
					assert.Zero(t, st.TooManyRequests+st.Refusals)
					for _, f := range fbs.all() {
						assert.False(t, f.Throttled)
					}
					return
				}
				got := fbs.all()
				require.NotEmpty(t, got)
				assert.True(t, got[0].Throttled)
				assert.Equal(t, tc.wantPause, got[0].Pause)
				assert.Equal(t, uint64(1), st.Pauses)
				assert.Equal(t, uint64(1), st.Refusals)
				assert.Zero(t, st.TooManyRequests)
			})
		})
	}
}

// A refusal read in the body is retried as a 429 is (Rule.Retries).
func TestRefusalRetried(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		up := &scripted{answers: []func(*http.Request) *http.Response{
			answer(200, `{"status":"OVER_QUERY_LIMIT"}`, "Retry-After", "1"), answer(200, `{"status":"OK"}`)}}
		tr := newTransport(t, up, nil, rule(func(r *throttle.Rule) {
			r.Refused = []throttle.Refusal{{Status: 200, Body: "OVER_QUERY_LIMIT"}}
			r.Retries = 2
		}))
		req, err := http.NewRequest(http.MethodGet, "https://api.example.com/v1/geocode", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, `{"status":"OK"}`, string(b))
		assert.Equal(t, 2, up.count())
	})
}

// Reading a refusal's code leaves the caller the whole body, byte for byte,
// and closes it once, whether the code is found or not, for bodies shorter
// and longer than what is read of them, and a body that fails midway.
func TestRefusalBodyUnconsumed(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	errCut := errors.New("connection reset")
	for _, tc := range []struct {
		name string
		body []byte
		cut  bool // the body fails after its bytes
		want time.Duration
	}{
		{"empty", nil, false, 0},
		{"short, with the code", []byte(`{"status":"OVER_QUERY_LIMIT"}`), false, time.Second},
		{"long, the code early", append([]byte(`{"status":"OVER_QUERY_LIMIT","x":"`), random(100_000)...), false, time.Second},
		{"long, no code", random(100_000), false, 0},
		{"the code beyond what is read", append(bytes.Repeat([]byte(" "), 8192), []byte(`"OVER_QUERY_LIMIT"`)...), false, 0},
		{"cut short", append([]byte(`"OVER_QUERY_LIMIT" `), random(100)...), true, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var cc *closeCount
				base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
					var rd io.Reader = bytes.NewReader(tc.body)
					if tc.cut {
						rd = io.MultiReader(rd, &failing{err: errCut})
					}
					cc = &closeCount{Reader: rd}
					return &http.Response{StatusCode: 200, Header: http.Header{"Retry-After": {"1"}}, Body: cc, Request: r}, nil
				})
				tr := newTransport(t, base, nil, rule(func(r *throttle.Rule) {
					r.Refused = []throttle.Refusal{{Status: 200, Body: "OVER_QUERY_LIMIT"}}
				}))
				req, err := http.NewRequest(http.MethodGet, "https://api.example.com/v1/geocode", nil)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+secret)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				got, err := io.ReadAll(resp.Body)
				if tc.cut {
					assert.ErrorIs(t, err, errCut, "the body's own error, after its bytes")
				} else {
					assert.NoError(t, err)
				}
				assert.True(t, bytes.Equal(tc.body, got), "the same bytes: %d read of %d", len(got), len(tc.body))
				assert.Zero(t, cc.n(), "not closed before the caller closes it")
				require.NoError(t, resp.Body.Close())
				assert.Equal(t, 1, cc.n())
				assert.Equal(t, tc.want, elapsed(func() { _, _ = do(t, tr, context.Background()) }))
			})
		})
	}
}

type failing struct{ err error }

func (f *failing) Read([]byte) (int, error) { return 0, f.err }

// A Refusal that could never match, or that names what no response has, is
// refused when the rule is built.
func TestRefusalValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    throttle.Refusal
		want string
	}{
		{"empty", throttle.Refusal{}, "says nothing"},
		{"status out of range", throttle.Refusal{Status: 42}, "status 42"},
		{"value without header", throttle.Refusal{Value: "0"}, "Value without Header"},
		{"header not a token", throttle.Refusal{Header: "Retry After"}, "header name"},
		{"blank body", throttle.Refusal{Body: "  "}, "Body"},
		{"body too long", throttle.Refusal{Body: string(bytes.Repeat([]byte("a"), 300))}, "Body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, field := range []string{"Refused", "NotRefused"} {
				_, err := throttle.New(nil, newMemory(t), rule(func(r *throttle.Rule) {
					if field == "Refused" {
						r.Refused = []throttle.Refusal{tc.r}
					} else {
						r.NotRefused = []throttle.Refusal{tc.r}
					}
				}))
				var ce *throttle.ConfigError
				require.ErrorAs(t, err, &ce, field)
				assert.Contains(t, ce.Reason, field)
				assert.Contains(t, ce.Reason, tc.want)
			}
		})
	}
}
