package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/store"
)

// maxProbeGap is the longest wait between probes.
var maxProbeGap = time.Duration(float64(engine.ProbeMaxInterval) * (1 + engine.ProbeRandomization))

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// outageRig is a transport on a fake store with a recording base and hook.
type outageRig struct {
	st *fakestore.Store
	tr *Transport

	mu        sync.Mutex
	sent      []time.Time
	decisions []Decision
	feedback  []Feedback
	answer    http.Header // non-nil: the base answers 429 with these headers
}

func newOutageRig(t *testing.T, rule Rule, opts ...Option) *outageRig {
	g := &outageRig{st: fakestore.New()}
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.sent = append(g.sent, time.Now())
		if g.answer != nil {
			return &http.Response{StatusCode: http.StatusTooManyRequests, Header: g.answer.Clone(), Body: http.NoBody, Request: r}, nil
		}
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	opts = append([]Option{WithRule(rule), WithOnDecision(func(d Decision) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.decisions = append(g.decisions, d)
	}), WithOnFeedback(func(f Feedback) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.feedback = append(g.feedback, f)
	})}, opts...)
	tr, err := New(base, g.st, opts...)
	require.NoError(t, err)
	g.tr = tr
	return g
}

// calls is how often the transport called the store.
func (g *outageRig) calls() int {
	times, _ := g.st.Calls()
	return len(times)
}

func (g *outageRig) do(t *testing.T) (Decision, error) {
	req, err := http.NewRequest(http.MethodGet, "https://api.example.com/x", nil)
	require.NoError(t, err)
	resp, err := g.tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.decisions[len(g.decisions)-1], err
}

var outageRule = Rule{Name: "r", Host: "api.example.com", Key: Fixed("k"), Limits: []Limit{PerSecond(1000)}}

// TestDownStoreIsNotCalled: after one failure, requests do not call the store
// (and do not pay its connect timeout) until a probe succeeds; probes come
// one at a time, after a growing backoff of at most maxProbeGap.
func TestDownStoreIsNotCalled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newOutageRig(t, outageRule)
		g.st.Fail(errDown, 3*time.Second) // a connect timeout

		// The first request pays the store timeout (not the 3s) and marks
		// the store down.
		start := time.Now()
		d, err := g.do(t)
		assert.Equal(t, engine.DefaultStoreTimeout, time.Since(start))
		require.ErrorIs(t, err, ErrStoreUnavailable)
		var se *StoreError
		require.ErrorAs(t, err, &se)
		assert.True(t, se.Timeout, "the store gave no answer in time")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller would take it for its own deadline")
		assert.Contains(t, err.Error(), "no answer within 1s (WithStoreTimeout)")
		assert.False(t, se.NotTried)
		assert.Equal(t, Failed, d.Outcome)

		// 20 seconds of requests from 8 goroutines, each every 5ms: they
		// fail at once, except the probes, which pay the timeout.
		var wg sync.WaitGroup
		var mu sync.Mutex
		notTried, tried := 0, 0
		for range 8 {
			wg.Go(func() {
				for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
					_, err := g.do(t)
					require.ErrorIs(t, err, ErrStoreUnavailable)
					var se *StoreError
					require.ErrorAs(t, err, &se)
					mu.Lock()
					if se.NotTried {
						notTried++
					} else {
						tried++
					}
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		times, maxInflight := g.st.Calls()
		calls := len(times)
		assert.Equal(t, 1, maxInflight, "one probe at a time")
		assert.Equal(t, calls-1, tried)
		// Probes: the first after about 50ms, then growing, capped at
		// maxProbeGap, plus the store timeout the probe itself takes.
		t.Logf("%d requests refused at once, %d probes in 20s", notTried, tried)
		assert.Greater(t, notTried, 100*tried)
		assert.LessOrEqual(t, tried, 20)
		for i := 2; i < len(times); i++ {
			gap := times[i].Sub(times[i-1]) - engine.DefaultStoreTimeout
			assert.LessOrEqual(t, gap, maxProbeGap+5*time.Millisecond, "probe %d", i)
			assert.GreaterOrEqual(t, gap, time.Duration(float64(engine.ProbeInitialInterval)*(1-engine.ProbeRandomization)), "probe %d", i)
		}
	})
}

// TestRecoveryWithinASecond: once the store is back, requests use it again
// within the largest backoff interval plus the gap between requests.
func TestRecoveryWithinASecond(t *testing.T) {
	t.Parallel()
	for _, outage := range []time.Duration{10 * time.Millisecond, time.Second, 30 * time.Second} {
		t.Run(outage.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newOutageRig(t, outageRule)
				g.st.Fail(errDown, 0)
				back := time.Now().Add(outage)
				time.AfterFunc(outage, func() { g.st.Fail(nil, 0) })
				var recovered time.Time
				for recovered.IsZero() {
					if _, err := g.do(t); err == nil {
						recovered = time.Now()
					}
					time.Sleep(time.Millisecond)
				}
				took := recovered.Sub(back)
				t.Logf("outage %s: recovered %s after the store came back", outage, took)
				assert.LessOrEqual(t, took, maxProbeGap+time.Millisecond)
				d, err := g.do(t)
				require.NoError(t, err)
				assert.Equal(t, Sent, d.Outcome)
				assert.False(t, d.Local)
				assert.NoError(t, d.Err)
			})
		})
	}
}

// TestContextErrorDoesNotMarkDown: a request whose context ends during the
// store call is Canceled and leaves the store up.
func TestContextErrorDoesNotMarkDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newOutageRig(t, outageRule)
		g.st.Fail(errDown, time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/x", nil)
		require.NoError(t, err)
		_, err = g.tr.RoundTrip(req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrStoreUnavailable)
		g.st.Fail(nil, 0)
		_, err = g.do(t)
		require.NoError(t, err)
		calls := g.calls()
		assert.Equal(t, 2, calls, "the second request called the store: it was not marked down")
	})
}

// TestFailOpenWhileDown: skipped requests are sent uncounted, with the
// StoreError in the decision.
func TestFailOpenWhileDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newOutageRig(t, outageRule, WithFailOpen())
		g.st.Fail(errDown, 0)
		for range 50 {
			d, err := g.do(t)
			require.NoError(t, err)
			assert.Equal(t, FailedOpen, d.Outcome)
			assert.ErrorIs(t, d.Err, ErrStoreUnavailable)
		}
		calls := g.calls()
		assert.Equal(t, 1, calls, "no probe is due yet")
		assert.Len(t, g.sent, 50)
	})
}

// TestStoreErrorIsNotATimeout: a store that answers with an error at once
// (a refused connection, WRONGPASS, OOM) is reported with that error, not as
// a timeout.
func TestStoreErrorIsNotATimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newOutageRig(t, outageRule)
		g.st.Fail(errDown, 0) // fails at once
		_, err := g.do(t)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		require.ErrorIs(t, err, errDown)
		var se *StoreError
		require.ErrorAs(t, err, &se)
		assert.False(t, se.Timeout, "the store answered, with an error")
		assert.NotContains(t, err.Error(), "no answer within")
	})
}

// TestFailOpenListens: a response sent uncounted while the store is down is
// still listened to: its 429 is counted and reported, with the reason the
// pause could not be shared.
func TestFailOpenListens(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newOutageRig(t, outageRule, WithFailOpen())
		g.st.Fail(errDown, 0)
		g.answer = http.Header{"Retry-After": {"2"}}
		d, err := g.do(t)
		require.NoError(t, err)
		assert.Equal(t, FailedOpen, d.Outcome)
		assert.Equal(t, uint64(1), g.tr.Stats().Total().Upstream.TooManyRequests)
		require.Len(t, g.feedback, 1)
		assert.True(t, g.feedback[0].Throttled)
		assert.Equal(t, 2*time.Second, g.feedback[0].Pause)
		assert.ErrorIs(t, g.feedback[0].Err, ErrStoreUnavailable)
		calls := g.calls()
		assert.Equal(t, 1, calls, "the feedback does not call a store marked down")
	})
}

// TestFailLocalHoldsPauses: while the store is down under FailLocal, a 429's
// pause is held by the local limiter.
func TestFailLocalHoldsPauses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rule := outageRule
		rule.MaxServerWait = time.Second
		g := newOutageRig(t, rule, WithFailLocal(0.5))
		g.st.Fail(errDown, 0)
		g.answer = http.Header{"Retry-After": {"5"}}
		d, err := g.do(t)
		require.NoError(t, err)
		assert.True(t, d.Local)
		require.Len(t, g.feedback, 1)
		require.NoError(t, g.feedback[0].Err)
		assert.Equal(t, uint64(1), g.tr.Stats().Total().Upstream.Pauses)

		d, err = g.do(t)
		var le *LimitError
		require.ErrorAs(t, err, &le)
		assert.True(t, le.Upstream, "paused for 5s, more than MaxServerWait")
		assert.True(t, d.Local)
		assert.Equal(t, Limited, d.Outcome)
	})
}

// TestFailLocal: while the store is down, the local limiter admits the stated
// share of each limit, waiting as the rule says; afterwards the store decides
// again.
func TestFailLocal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rule := Rule{Name: "r", Host: "api.example.com", Key: Fixed("k"), Limits: []Limit{PerSecond(8)}, Margin: NoMargin}
		g := newOutageRig(t, rule, WithFailLocal(0.25))
		g.st.Fail(errDown, 0)
		start := time.Now()
		for i := range 6 {
			d, err := g.do(t)
			require.NoError(t, err, i)
			assert.Equal(t, Sent, d.Outcome)
			assert.True(t, d.Local)
			assert.ErrorIs(t, d.Err, ErrStoreUnavailable)
		}
		// 2 per second locally: sends at 0, 0, 1s, 1s, 2s, 2s.
		assert.Equal(t, 2*time.Second, time.Since(start))
		for i, at := range g.sent {
			assert.Equal(t, time.Duration(i/2)*time.Second, at.Sub(start), "send %d", i)
		}

		// FailFast locally: a LimitError, with Local set.
		ff := newOutageRig(t, Rule{Name: "ff", Host: "api.example.com", Key: Fixed("k"), Limits: []Limit{PerSecond(4)}, FailFast: true, Margin: NoMargin},
			WithFailLocal(0.5))
		ff.st.Fail(errDown, 0)
		for range 2 {
			_, err := ff.do(t)
			require.NoError(t, err)
		}
		d, err := ff.do(t)
		require.ErrorIs(t, err, ErrLimited)
		assert.Equal(t, Limited, d.Outcome)
		assert.True(t, d.Local)

		// A cost above the local share is refused with the store's error.
		big := newOutageRig(t, Rule{Name: "big", Host: "api.example.com", Key: Fixed("k"), Limits: []Limit{PerSecond(4)},
			Cost: func(*http.Request) int { return 3 }}, WithFailLocal(0.5))
		big.st.Fail(errDown, 0)
		d, err = big.do(t)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		assert.Contains(t, err.Error(), "cost 3 is above the local share of a limit, 2")
		assert.Equal(t, Failed, d.Outcome)

		// Back: the store decides again.
		g.st.Fail(nil, 0)
		time.Sleep(time.Second)
		d, err = g.do(t)
		require.NoError(t, err)
		assert.False(t, d.Local)
		assert.NoError(t, d.Err)
	})
}

// TestLocalShares checks the local limits derived from each share.
func TestLocalShares(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n     int
		share float64
		want  int
	}{
		{300, 1.0 / 3, 100}, {200, 0.25, 50}, {10, 0.01, 1}, {7, 0.5, 3}, {5, 1, 5},
	} {
		tr, err := New(nil, fakestore.New(), WithRule(Rule{Host: "a.example", Limits: []Limit{Per(tc.n, time.Second)}, Margin: NoMargin, NoDefaultPace: true}),
			WithFailLocal(tc.share))
		require.NoError(t, err)
		assert.Equal(t, limits([]Limit{Per(tc.want, time.Second)}), tr.eng.LocalLimits(tr.rules[0].scope), "%d × %v", tc.n, tc.share)
	}
}

// TestStoreTimeoutOption: WithStoreTimeout bounds the store call, and a call
// cut by it marks the store down like any failure.
func TestStoreTimeoutOption(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newOutageRig(t, outageRule, WithStoreTimeout(50*time.Millisecond), WithFailOpen())
		g.st.Fail(errDown, time.Hour) // a black-holed host
		start := time.Now()
		d, err := g.do(t)
		require.NoError(t, err)
		assert.Equal(t, 50*time.Millisecond, time.Since(start))
		assert.Equal(t, FailedOpen, d.Outcome)
		var se *StoreError
		require.ErrorAs(t, d.Err, &se)
		assert.True(t, se.Timeout)
		assert.NotErrorIs(t, d.Err, context.DeadlineExceeded)
		assert.Contains(t, d.Err.Error(), "no answer within 50ms (WithStoreTimeout)")
		start = time.Now()
		d, err = g.do(t)
		require.NoError(t, err)
		assert.Zero(t, time.Since(start), "marked down: not tried")
		require.ErrorAs(t, d.Err, &se)
		assert.True(t, se.NotTried)
		assert.True(t, se.Timeout, "the failure that marked it down was a timeout")
	})
}

// TestFailLocalStartsFromOwnSends: shared sends are mirrored in the local
// limiter, so a process that used its share of the window just before the
// store died waits for the window to pass instead of adding a share on top.
func TestFailLocalStartsFromOwnSends(t *testing.T) {
	t.Parallel()
	// The local limiter counts with the rule's algorithm, mirrored sends
	// included (each algorithm keeps its own state in a Memory store).
	for _, tc := range []struct {
		alg   Algorithm
		limit Limit
	}{
		{SlidingLog, PerSecond(8)},
		{FixedWindow, PerSecond(8)},
		{Buckets, Limit{N: 8, Per: time.Second, Precision: 100 * time.Millisecond}},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) { failLocalStartsFromOwnSends(t, tc.alg, tc.limit) })
	}
}

func failLocalStartsFromOwnSends(t *testing.T, alg Algorithm, limit Limit) {
	synctest.Test(t, func(t *testing.T) {
		rule := Rule{Name: "r", Host: "api.example.com", Key: Fixed("k"), Limits: []Limit{limit}, Margin: NoMargin, Algorithm: alg}
		g := newOutageRig(t, rule, WithFailLocal(0.25))
		start := time.Now()
		for range 2 { // its share of the window, through the shared store
			d, err := g.do(t)
			require.NoError(t, err)
			assert.False(t, d.Local)
		}
		time.Sleep(100 * time.Millisecond)
		g.st.Fail(errDown, 0)
		d, err := g.do(t)
		require.NoError(t, err)
		assert.True(t, d.Local)
		assert.Equal(t, time.Second, time.Since(start), "the local limiter knew of the two shared sends")
		assert.Equal(t, 900*time.Millisecond, d.Delay)
	})
}

// TestKeyStateErrorIsThatRequests: a store error about one key's state (a
// *store.KeyStateError: WRONGTYPE, a malformed entry) fails that request
// alone, under every policy: it is not a StoreError, nothing is sent
// uncounted or counted locally, and the store stays up (the next request
// calls it, none is "not tried"). A probe that meets one marks the store up:
// the store answered.
func TestKeyStateErrorIsThatRequests(t *testing.T) {
	t.Parallel()
	keyErr := &store.KeyStateError{Key: "k", Reason: "still wrong after a repair", Err: errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")}
	for _, policy := range []struct {
		name string
		opts []Option
	}{{"FailClosed", nil}, {"FailOpen", []Option{WithFailOpen()}}, {"FailLocal", []Option{WithFailLocal(0.5)}}} {
		t.Run(policy.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newOutageRig(t, outageRule, policy.opts...)
				g.st.Fail(keyErr, 0)
				for range 5 {
					d, err := g.do(t)
					require.ErrorIs(t, err, store.ErrKeyState)
					assert.NotErrorIs(t, err, ErrStoreUnavailable)
					assert.Equal(t, Failed, d.Outcome)
					assert.False(t, d.Local)
				}
				assert.Equal(t, 5, g.calls(), "every request called the store: none was skipped")
				assert.Empty(t, g.sent, "nothing sent uncounted")

				// Down, then a probe that meets a key's state: up again.
				g.st.Fail(errDown, 0)
				d, _ := g.do(t)
				require.ErrorIs(t, d.Err, ErrStoreUnavailable)
				time.Sleep(maxProbeGap)
				g.st.Fail(keyErr, 0)
				_, err := g.do(t)
				require.ErrorIs(t, err, store.ErrKeyState)
				g.st.Fail(nil, 0)
				d, err = g.do(t)
				require.NoError(t, err)
				assert.Equal(t, Sent, d.Outcome)
				assert.NoError(t, d.Err, "marked up by the probe that met the key's state")
			})
		})
	}
}

// TestInvalidRequestIsNoOutage: a request the store refuses as invalid fails
// alone, under every policy: it is not sent uncounted under FailOpen, and
// the store is not marked down for the requests after it.
func TestInvalidRequestIsNoOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		g := newOutageRig(t, outageRule, WithFailOpen())
		g.st.Fail(fmt.Errorf("%w: a test's", contract.ErrInvalidRequest), 0)
		d, err := g.do(t)
		require.Error(t, err)
		assert.Equal(t, Failed, d.Outcome)
		assert.ErrorIs(t, err, contract.ErrInvalidRequest)
		assert.NotErrorIs(t, err, ErrStoreUnavailable)
		assert.Empty(t, g.sent, "nothing sent uncounted")
		g.st.Fail(nil, 0)
		d, err = g.do(t)
		require.NoError(t, err)
		assert.Equal(t, Sent, d.Outcome, "the store was not marked down")
		assert.Equal(t, 2, g.calls())
	})
}
