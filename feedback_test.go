package throttle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
)

// scripted is a fake upstream that answers each request with the next of its
// responses (the last one repeats), recording what it received.
type scripted struct {
	mu      sync.Mutex
	answers []func(*http.Request) *http.Response
	reqs    []*http.Request
	bodies  []string
	times   []time.Time
	closed  []*closeCount
}

type closeCount struct {
	io.Reader
	mu     sync.Mutex
	closes int
}

func (c *closeCount) Close() error { c.mu.Lock(); c.closes++; c.mu.Unlock(); return nil }
func (c *closeCount) n() int       { c.mu.Lock(); defer c.mu.Unlock(); return c.closes }

func (s *scripted) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body := ""
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		body = string(b)
	}
	s.reqs = append(s.reqs, r)
	s.bodies = append(s.bodies, body)
	s.times = append(s.times, time.Now())
	i := min(len(s.reqs)-1, len(s.answers)-1)
	resp := s.answers[i](r)
	cc := &closeCount{Reader: resp.Body}
	resp.Body = cc
	s.closed = append(s.closed, cc)
	return resp, nil
}

func (s *scripted) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.reqs) }

// answer returns a response of status with the given headers and body.
func answer(status int, body string, kv ...string) func(*http.Request) *http.Response {
	return func(r *http.Request) *http.Response {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r}
	}
}

var ok200 = answer(http.StatusOK, "ok")

type feedbackLog struct {
	mu   sync.Mutex
	list []throttle.Feedback
}

func (f *feedbackLog) option() throttle.Option {
	return throttle.WithOnFeedback(func(x throttle.Feedback) {
		f.mu.Lock()
		f.list = append(f.list, x)
		f.mu.Unlock()
	})
}

func (f *feedbackLog) all() []throttle.Feedback {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]throttle.Feedback(nil), f.list...)
}

// do sends one GET with a bearer token and returns the response (body read
// and closed) or the error.
func do(t *testing.T, tr http.RoundTripper, ctx context.Context) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/v1/items", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

func rule(mut func(*throttle.Rule)) throttle.Option {
	r := throttle.Rule{
		Name: "api", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(10)},
		Key: throttle.ByBearerToken(), Margin: throttle.NoMargin,
	}
	if mut != nil {
		mut(&r)
	}
	return throttle.WithRule(r)
}

func TestPauseAfter429(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		answer    func(*http.Request) *http.Response
		wantPause time.Duration
	}{
		{"429 with Retry-After seconds", answer(429, "", "Retry-After", "2"), 2 * time.Second},
		{"429 with fractional Retry-After", answer(429, "", "Retry-After", "0.25"), 250 * time.Millisecond},
		{"429 with an HTTP date, against the response's Date", answer(429, "",
			"Date", "Sat, 21 Nov 2026 12:00:00 GMT", "Retry-After", "Sat, 21 Nov 2026 12:00:03 GMT"), 3 * time.Second},
		{"503 with Retry-After", answer(503, "", "Retry-After", "1"), time.Second},
		// The first 429 despite compliance moves the key to a pace (shape.go):
		// two of its spacings; later ones, one window (TestShapeChange).
		{"429 without Retry-After: two spacings of the learned pace", answer(429, ""), 200 * time.Millisecond},
		{"429 with remaining 0 until a reset", answer(429, "", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "4"), 4 * time.Second},
		{"a huge Retry-After is capped", answer(429, "", "Retry-After", "86400000"), throttle.MaxServerPause},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := &scripted{answers: []func(*http.Request) *http.Response{tc.answer, ok200}}
				var fbs feedbackLog
				tr := newTransport(t, up, nil, fbs.option(), rule(func(r *throttle.Rule) {
					r.MaxServerWait = 2 * time.Hour
					r.MaxWait = 2 * time.Hour
				}))
				_, err := do(t, tr, context.Background())
				require.NoError(t, err, "a throttled response is a response")
				assert.Equal(t, tc.wantPause, elapsed(func() {
					_, err := do(t, tr, context.Background())
					require.NoError(t, err)
				}), "the next request waits for the pause")
				got := fbs.all()
				require.NotEmpty(t, got)
				assert.True(t, got[0].Throttled)
				assert.Equal(t, tc.wantPause, got[0].Pause)
				assert.NotContains(t, got[0].Key, secret)
				assert.Equal(t, "api", got[0].Rule)
				st := tr.Stats().Total().Upstream
				assert.Equal(t, uint64(1), st.Pauses)
				assert.Equal(t, uint64(1), st.TooManyRequests+st.Unavailable)
			})
		})
	}
}

// A route bucket's 429 (Discord) pauses until the bucket's exact reset, not
// its Retry-After rounded up to the second, and does not move the key to a
// pace: the bucket says how it counts.
func TestRouteBucket429KeepsTheShape(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		refused := answer(429, "", "Retry-After", "3", "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset-After", "2.780", "X-RateLimit-Bucket", "abcd")
		up := &scripted{answers: []func(*http.Request) *http.Response{refused, ok200}}
		var fbs feedbackLog
		tr := newTransport(t, up, nil, fbs.option(), rule(nil))
		_, err := do(t, tr, context.Background())
		require.NoError(t, err)
		assert.Equal(t, 2780*time.Millisecond, elapsed(func() {
			_, err := do(t, tr, context.Background())
			require.NoError(t, err)
		}), "the next request waits for the bucket's reset")
		got := fbs.all()
		require.NotEmpty(t, got)
		assert.Equal(t, 2780*time.Millisecond, got[0].Pause)
		assert.Zero(t, got[0].Paced, "no pace")
		assert.Zero(t, tr.Stats().Total().Upstream.Reshapes)
	})
}

func TestNoPauseWithoutThrottling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		up := &scripted{answers: []func(*http.Request) *http.Response{
			answer(503, ""), answer(500, "", "Retry-After", "5"), ok200}}
		tr := newTransport(t, up, nil, rule(nil))
		for range 3 {
			assert.Zero(t, elapsed(func() { _, _ = do(t, tr, context.Background()) }))
		}
		assert.Zero(t, tr.Stats().Total().Upstream)
	})
}

// TestPauseIsFleetWide: a 429 seen by one transport pauses another sharing
// its store; the pause past MaxServerWait fails at once with an upstream
// LimitError that a job queue can reschedule.
func TestPauseIsFleetWide(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "45"), ok200}}
		var decisions decisionLog
		a := newTransport(t, up, st, rule(nil))
		b := newTransport(t, up, st, rule(nil), decisions.option())
		_, err := do(t, a, context.Background())
		require.NoError(t, err)

		var resp *http.Response
		d := elapsed(func() { resp, err = do(t, b, context.Background()) })
		assert.Zero(t, d, "refused at once rather than sleep 45s")
		assert.Nil(t, resp)
		require.ErrorIs(t, err, throttle.ErrLimited)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.True(t, le.Upstream)
		assert.Equal(t, 45*time.Second, le.RetryAfter)
		assert.Contains(t, le.Error(), "paused by the upstream")
		assert.False(t, le.BeyondDeadline, "MaxServerWait refused it, with no deadline")
		assert.False(t, le.BeyondMaxWait, "MaxServerWait refused it, not MaxWait")
		last := decisions.last(t)
		assert.Equal(t, throttle.Limited, last.Outcome)
		assert.True(t, last.Upstream)
		assert.Equal(t, 1, up.count(), "nothing more was sent")

		// Within MaxServerWait it waits instead, unless the context's
		// deadline comes first; a deadline does not make a refusal by
		// MaxServerWait one by the deadline.
		c := newTransport(t, up, st, rule(func(r *throttle.Rule) { r.MaxServerWait = time.Minute }))
		for tr, beyond := range map[*throttle.Transport]bool{b: false, c: true} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = do(t, tr, ctx)
			cancel()
			require.ErrorAs(t, err, &le)
			assert.Equal(t, beyond, le.BeyondDeadline)
		}
		// A MaxWait nearer than MaxServerWait refuses the pause itself.
		e := newTransport(t, up, st, rule(func(r *throttle.Rule) { r.MaxServerWait, r.MaxWait = time.Minute, 10*time.Second }))
		_, err = do(t, e, context.Background())
		require.ErrorAs(t, err, &le)
		assert.True(t, le.Upstream)
		assert.True(t, le.BeyondMaxWait)
		assert.Contains(t, le.Error(), "paused by the upstream, retry after 45s, beyond the rule's MaxWait")
		assert.Equal(t, 45*time.Second, elapsed(func() {
			_, err := do(t, c, context.Background())
			require.NoError(t, err)
		}))
	})
}

func TestLearnedLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// the first response's headers; the rule allows 10 per second
		kv    []string
		limit []throttle.Limit
		// wantGaps are the delays of the next requests
		want []time.Duration
	}{
		{"IETF RateLimit-Policy tightens 10/s to 2/s", []string{"RateLimit-Policy", `"default";q=2;w=1`},
			nil, []time.Duration{0, time.Second, 0, time.Second}},
		{"X-RateLimit-Limit tightens the longest window", []string{"X-RateLimit-Limit", "3"},
			[]throttle.Limit{throttle.PerSecond(5)}, []time.Duration{0, 0, time.Second, 0}},
		{"a GCRA's burst (throttled, MaxBurst 0) is no limit per window", []string{"X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"},
			nil, []time.Duration{0, 0, 0, 0}},
		{"X-RateLimit-Limit below half the configured limit is a burst size", []string{"X-RateLimit-Limit", "4"},
			nil, []time.Duration{0, 0, 0, 0}},
		{"a limit above the configured one changes nothing", []string{"X-RateLimit-Limit", "50", "RateLimit-Policy", `a;q=100;w=1`},
			nil, []time.Duration{0, 0, 0, 0}},
		{"a policy over a longer window than the rule's is ignored", []string{"RateLimit-Policy", `day;q=1;w=86400`},
			nil, []time.Duration{0, 0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := &scripted{answers: []func(*http.Request) *http.Response{answer(200, "", tc.kv...)}}
				var fbs feedbackLog
				tr := newTransport(t, up, nil, fbs.option(), rule(func(r *throttle.Rule) {
					if tc.limit != nil {
						r.Limits = tc.limit
					}
				}))
				_, err := do(t, tr, context.Background())
				require.NoError(t, err)
				var got []time.Duration
				for range tc.want {
					got = append(got, elapsed(func() {
						_, err := do(t, tr, context.Background())
						require.NoError(t, err)
					}))
				}
				assert.Equal(t, tc.want, got)
				learned := tc.want[1] != 0 || tc.want[2] != 0
				if learned {
					assert.Equal(t, uint64(1), tr.Stats().Total().Upstream.Tightenings, "recorded once, not on every response")
				} else {
					assert.Zero(t, tr.Stats().Total().Upstream.Tightenings)
				}
				assert.Zero(t, tr.Stats().Total().Upstream.TooManyRequests)
			})
		})
	}
}

func TestAppUsageFullPauses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(200, "", "X-App-Usage", `{"call_count":100}`), ok200}}
		tr := newTransport(t, up, nil, rule(func(r *throttle.Rule) {
			r.MaxServerWait, r.MaxWait, r.Limits = time.Hour, time.Hour, []throttle.Limit{throttle.PerHour(100)}
		}))
		_, err := do(t, tr, context.Background())
		require.NoError(t, err)
		// A hundredth of the hour: the sends over 99% leave the window in
		// about that long.
		assert.Equal(t, 36*time.Second, elapsed(func() {
			_, err := do(t, tr, context.Background())
			require.NoError(t, err)
		}))
	})
}

// TestBudgetFromHeaders: "remaining 2 until a reset in 10s" holds the third
// request to the reset, with the reset read as an epoch against Date.
func TestBudgetFromHeaders(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// The server's clock is far from ours (synctest's is in 2000): the
		// epoch reset is read against its Date.
		date := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(200, "",
			"Date", date.UTC().Format(http.TimeFormat),
			"X-RateLimit-Remaining", "2", "X-RateLimit-Reset", strconv.FormatInt(date.Add(10*time.Second).Unix(), 10)), ok200}}
		tr := newTransport(t, up, nil, rule(func(r *throttle.Rule) { r.Limits, r.NoDefaultPace = []throttle.Limit{throttle.PerMinute(100)}, true }))
		_, err := do(t, tr, context.Background())
		require.NoError(t, err)
		var got []time.Duration
		for range 3 {
			got = append(got, elapsed(func() {
				_, err := do(t, tr, context.Background())
				require.NoError(t, err)
			}))
		}
		assert.Equal(t, []time.Duration{0, 0, 10 * time.Second}, got)
	})
}

func TestIgnoreUpstream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "30", "RateLimit-Policy", "a;q=1;w=1")}}
		var fbs feedbackLog
		tr := newTransport(t, up, nil, fbs.option(), rule(func(r *throttle.Rule) { r.IgnoreUpstream = true }))
		for range 3 {
			assert.Zero(t, elapsed(func() { _, _ = do(t, tr, context.Background()) }))
		}
		st := tr.Stats().Total().Upstream
		assert.Equal(t, uint64(3), st.TooManyRequests, "counted")
		assert.Zero(t, st.Pauses)
		assert.Zero(t, st.Tightenings)
		assert.Len(t, fbs.all(), 3)
		for _, f := range fbs.all() {
			assert.Zero(t, f.Pause)
		}
	})
}

// TestFeedbackWithoutFeedbackStore: a store without contract.Feedback still
// works; 429s are counted and reported, nothing is paused.
func TestFeedbackWithoutFeedbackStore(t *testing.T) {
	t.Parallel()
	up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "1")}}
	tr := newTransport(t, up, fakestore.New().WithoutFeedback(), rule(nil))
	_, err := do(t, tr, context.Background())
	require.NoError(t, err)
	_, err = do(t, tr, context.Background())
	require.NoError(t, err)
	assert.Equal(t, uint64(2), tr.Stats().Total().Upstream.TooManyRequests)
	assert.Zero(t, tr.Stats().Total().Upstream.Pauses)
}

func TestFeedbackStoreErrorIsReported(t *testing.T) {
	t.Parallel()
	up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "1")}}
	var fbs feedbackLog
	var logs bytes.Buffer
	st := fakestore.New()
	st.FailLearn(errors.New("redis down"))
	tr := newTransport(t, up, st, fbs.option(),
		throttle.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), rule(nil))
	resp, err := do(t, tr, context.Background())
	require.NoError(t, err)
	assert.Equal(t, 429, resp.StatusCode)
	require.Len(t, fbs.all(), 1)
	assert.EqualError(t, fbs.all()[0].Err, "redis down")
	assert.Contains(t, logs.String(), "throttle feedback")
	assert.NotContains(t, logs.String(), secret)
	assert.Zero(t, tr.Stats().Total().Upstream.Pauses)
}

func TestMaxServerWaitValidation(t *testing.T) {
	t.Parallel()
	_, err := throttle.New(nil, newMemory(t), rule(func(r *throttle.Rule) { r.MaxServerWait = -time.Second }))
	assert.True(t, isA[*throttle.ConfigError](err), "%v", err)
	_, err = throttle.New(nil, newMemory(t), rule(func(r *throttle.Rule) { r.Retries = throttle.MaxRetries + 1 }))
	assert.True(t, isA[*throttle.ConfigError](err), "%v", err)
	_, err = throttle.New(nil, newMemory(t), rule(func(r *throttle.Rule) { r.Retries, r.FailFast = 1, true }))
	assert.True(t, isA[*throttle.ConfigError](err), "%v", err)
	_, err = throttle.New(nil, newMemory(t), throttle.WithOnFeedback(nil), rule(nil))
	assert.True(t, isA[*throttle.ConfigError](err), "%v", err)
}

// fixedWindow is an upstream that counts its own fixed windows of n per w,
// starting at phase past the Unix epoch's multiples of w (not throttle's),
// answers 429 beyond n, and, when headers is set, states what remains and
// when its window resets (seconds from now, rounded up), as GitHub does.
type fixedWindow struct {
	n        int
	w, phase time.Duration
	headers  bool
	mu       sync.Mutex
	start    time.Time
	count    int
	refused  int
}

func (f *fixedWindow) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	start := now.Add(-f.phase).Truncate(f.w).Add(f.phase)
	if !start.Equal(f.start) {
		f.start, f.count = start, 0
	}
	status := http.StatusOK
	if f.count < f.n {
		f.count++
	} else {
		status = http.StatusTooManyRequests
		f.refused++
	}
	var kv []string
	if f.headers {
		reset := (start.Add(f.w).Sub(now) + time.Second - 1) / time.Second
		kv = []string{"X-RateLimit-Limit", strconv.Itoa(f.n), "X-RateLimit-Remaining", strconv.Itoa(f.n - f.count),
			"X-RateLimit-Reset", strconv.Itoa(int(reset))}
	}
	return answer(status, "", kv...)(r), nil
}

// TestCountingFollowsTheUpstreamsWindow: a FixedWindow rule counts windows
// aligned to the epoch; an upstream whose own fixed windows start elsewhere
// sees up to twice N in one of its windows. When the upstream states what
// remains until its reset, the budget holds the rule to the upstream's own
// window: no 429 (without the headers, the same traffic meets some).
func TestCountingFollowsTheUpstreamsWindow(t *testing.T) {
	t.Parallel()
	for _, headers := range []bool{true, false} {
		t.Run(fmt.Sprint("headers=", headers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := &fixedWindow{n: 10, w: 10 * time.Second, phase: 3 * time.Second, headers: headers}
				tr := newTransport(t, up, nil, throttle.WithRule(throttle.Rule{Host: "api.example.com",
					Limits: []throttle.Limit{throttle.Per(10, 10*time.Second)}, Algorithm: throttle.FixedWindow,
					Key: throttle.Fixed("k"), MaxWait: time.Minute}))
				// Some idle time first, so that throttle's windows and the
				// upstream's are out of step when the traffic starts.
				time.Sleep(5 * time.Second)
				sent := 0
				for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); {
					resp, err := do(t, tr, context.Background())
					require.NoError(t, err)
					if resp.StatusCode == http.StatusOK {
						sent++
					}
				}
				t.Logf("sent %d, refused %d", sent, up.refused)
				if headers {
					assert.Zero(t, up.refused, "the budget keeps the upstream's windows")
					assert.GreaterOrEqual(t, sent, 110, "about N per window")
				} else {
					assert.Positive(t, up.refused, "epoch windows against the upstream's: the test needs its headers")
				}
			})
		})
	}
}
