package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// statusBase answers 200, or the status in the query's "status", with the
// query's "retry" as Retry-After.
var statusBase = roundTripperFunc(func(r *http.Request) (*http.Response, error) {
	resp := okResponse(r)
	if s := r.URL.Query().Get("status"); s != "" {
		resp.StatusCode, _ = strconv.Atoi(s)
	}
	if ra := r.URL.Query().Get("retry"); ra != "" {
		resp.Header.Set("Retry-After", ra)
	}
	return resp, nil
})

// get sends a GET to rawURL through tr and returns the error.
func get(t *testing.T, tr http.RoundTripper, ctx context.Context, rawURL string) error {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

// waitBounds are the bounds of every WaitHistogram: 0, then 1ms, 2ms, 4ms,
// ... 65.536s.
var waitBounds = func() []time.Duration {
	b := []time.Duration{0}
	for d := time.Millisecond; d <= 65536*time.Millisecond; d *= 2 {
		b = append(b, d)
	}
	return b
}()

// waits returns a WaitHistogram with one wait of each of ds.
func waits(ds ...time.Duration) throttle.WaitHistogram {
	h := throttle.WaitHistogram{Bounds: waitBounds}
	for _, d := range ds {
		i, _ := slices.BinarySearch(waitBounds, d) // the first bound >= d
		h.Counts[i]++
		h.Count++
		h.Sum += d
	}
	return h
}

// upstreamStats returns what RuleStats.Upstream counts, in its order:
// 429s, 503s, pauses, tightenings, reshapes.
func upstreamStats(tooMany, unavailable, pauses, tightenings, reshapes uint64) (r throttle.RuleStats) {
	u := &r.Upstream
	u.TooManyRequests, u.Unavailable, u.Pauses, u.Tightenings, u.Reshapes = tooMany, unavailable, pauses, tightenings, reshapes
	return r
}

// TestStats drives a transport on a memory store through every outcome it
// can reach without a store failure, and checks every counter of Stats, per
// rule, and their sum.
func TestStats(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tr := newTransport(t, statusBase, nil,
			throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(1)}}),
			throttle.WithRule(throttle.Rule{Name: "ff", Host: "ff.example", Limits: []throttle.Limit{throttle.PerHour(1)}, FailFast: true}),
			throttle.WithRule(throttle.Rule{Name: "up", Host: "up.example", Limits: []throttle.Limit{throttle.PerSecond(100)}, Margin: throttle.NoMargin}),
			throttle.WithUnmatchedSent(false),
			throttle.WithRule(throttle.Rule{Name: "cost", Host: "cost.example", Limits: []throttle.Limit{throttle.PerSecond(1)},
				Cost: func(*http.Request) int { return 0 }}),
		)
		bg := context.Background()
		require.NoError(t, get(t, tr, bg, "https://api.example/a")) // sent at once
		require.NoError(t, get(t, tr, bg, "https://api.example/a")) // sent after 1s + the margin
		canceled, cancel := context.WithCancel(bg)
		cancel()
		require.ErrorIs(t, get(t, tr, canceled, "https://api.example/a"), context.Canceled)
		require.NoError(t, get(t, tr, bg, "https://ff.example/a"))
		require.ErrorIs(t, get(t, tr, bg, "https://ff.example/a"), throttle.ErrLimited)
		require.ErrorIs(t, get(t, tr, bg, "https://ff.example/a"), throttle.ErrLimited)
		require.NoError(t, get(t, tr, bg, "https://up.example/a?status=429"))                 // paces the key without a burst; pauses 2 spacings
		require.NoError(t, get(t, tr, bg, "https://up.example/a?status=503&retry=2"))         // waits 100ms (the default pace's burst, unearned, then one spacing); pauses 2s
		require.NoError(t, get(t, tr, bg, "https://up.example/a?status=503"))                 // waits 2s; no Retry-After: nothing
		require.ErrorIs(t, get(t, tr, bg, "https://cost.example/a"), throttle.ErrInvalidCost) // failed, not the store
		require.NoError(t, get(t, tr, bg, "https://other.example/a?status=429"))              // unmatched

		o := func(kv ...any) (c throttle.Outcomes) {
			for i := 0; i < len(kv); i += 2 {
				c[kv[i].(throttle.Outcome)] = uint64(kv[i+1].(int))
			}
			return c
		}
		up := upstreamStats(1, 1, 2, 0, 1)
		up.Rule, up.Requests, up.Wait = "up", o(throttle.Sent, 3), waits(0, 100*time.Millisecond, 2*time.Second)
		unmatched := upstreamStats(1, 0, 0, 0, 0)
		unmatched.Requests, unmatched.Wait = o(throttle.Unmatched, 1), waits()
		want := throttle.Stats{
			Rules: []throttle.RuleStats{
				{Rule: "api", Requests: o(throttle.Sent, 2, throttle.Canceled, 1),
					Wait: waits(0, time.Second+throttle.DefaultMargin)},
				{Rule: "ff", Requests: o(throttle.Sent, 1, throttle.Limited, 2), Wait: waits(0)},
				up,
				{Rule: "cost", Requests: o(throttle.Failed, 1), Wait: waits()},
			},
			Unmatched: unmatched,
		}
		got := tr.Stats()
		// Recent, the share of each limit used in its last window
		// (saturation_test.go), as the waits above leave it.
		recent := map[string][]float64{}
		for i := range got.Rules {
			recent[got.Rules[i].Rule] = got.Rules[i].Recent.Used
			got.Rules[i].Recent.Limits, got.Rules[i].Recent.Used, got.Rules[i].Recent.Wait = nil, nil, 0
		}
		assert.Equal(t, map[string][]float64{"api": {0}, "ff": {1}, "up": {0.01}, "cost": {0}}, recent)
		assert.Equal(t, want, got)
		assert.Equal(t, upstreamStats(2, 1, 2, 0, 1).Upstream, got.Total().Upstream)
		total := got.Total()
		assert.Equal(t, o(throttle.Sent, 6, throttle.Limited, 2, throttle.Canceled, 1, throttle.Failed, 1, throttle.Unmatched, 1), total.Requests)
		assert.Equal(t, uint64(6), total.Wait.Count)
		assert.Equal(t, waitBounds, total.Wait.Bounds)
		assert.Equal(t, 3*time.Second+100*time.Millisecond+throttle.DefaultMargin, total.Wait.Sum)
	})
}

// TestStatsStoreFailures: each store failure policy is counted under its
// own name, beside the outcome it gives.
func TestStatsStoreFailures(t *testing.T) {
	t.Parallel()
	down := errors.New("store down")
	for _, tc := range []struct {
		policy   storePolicy
		outcomes throttle.Outcomes
		store    [3]uint64 // Refused, Open, Local
	}{
		{failClosed, throttle.Outcomes{throttle.Failed: 2}, [3]uint64{2, 0, 0}},
		{failOpen, throttle.Outcomes{throttle.FailedOpen: 2}, [3]uint64{0, 2, 0}},
		{failLocal, throttle.Outcomes{throttle.Sent: 1, throttle.Limited: 1}, [3]uint64{0, 0, 2}},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				opts := append([]throttle.Option{
					throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Limits: []throttle.Limit{throttle.PerHour(1)},
						FailFast: true})}, tc.policy.options(1)...)
				tr := newTransport(t, statusBase, failingStore(down), opts...)
				for range 2 { // the first calls the store; the second finds it marked down
					_ = get(t, tr, context.Background(), "https://api.example/a")
				}
				got := tr.Stats().Rules[0]
				assert.Equal(t, tc.outcomes, got.Requests)
				assert.Equal(t, tc.store, [3]uint64{got.Store.Refused, got.Store.Open, got.Store.Local})
			})
		})
	}
}

// TestStatsSharedByName: rules of the same name share one entry, in the
// order of the options, the default rule last.
func TestStatsSharedByName(t *testing.T) {
	t.Parallel()
	lim := []throttle.Limit{throttle.PerSecond(100)}
	tr := newTransport(t, statusBase, nil,
		throttle.WithDefault(throttle.Rule{Limits: lim}),
		throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example", Limits: lim}),
		throttle.WithRule(throttle.Rule{Host: "b.example", Limits: lim}),
		throttle.WithRule(throttle.Rule{Name: "gw", Host: "c.example", Limits: lim}),
	)
	for _, u := range []string{"https://a.example/", "https://b.example/", "https://c.example/", "https://d.example/"} {
		require.NoError(t, get(t, tr, context.Background(), u))
	}
	var names []string
	var sent []uint64
	for _, r := range tr.Stats().Rules {
		names, sent = append(names, r.Rule), append(sent, r.Requests[throttle.Sent])
	}
	assert.Equal(t, []string{"gw", "b.example", "default"}, names)
	assert.Equal(t, []uint64{2, 1, 1}, sent)
}

// TestStatsConcurrent: counting is safe for concurrent use (under -race)
// and loses nothing.
func TestStatsConcurrent(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, statusBase, nil,
		throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(1 << 20)}}))
	const workers, n = 4, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range n {
				assert.NoError(t, get(t, tr, context.Background(), "https://api.example/a"))
				_ = tr.Stats()
			}
		})
	}
	wg.Wait()
	got := tr.Stats().Rules[0]
	assert.Equal(t, uint64(workers*n), got.Requests[throttle.Sent])
	assert.Equal(t, uint64(workers*n), got.Wait.Count)
}

// TestOutcomesCoverEveryOutcome: Outcomes has a slot for every Outcome.
func TestOutcomesCoverEveryOutcome(t *testing.T) {
	t.Parallel()
	var o throttle.Outcomes
	assert.Equal(t, "unmatched", throttle.Outcome(len(o)-1).String())
	assert.Equal(t, "unknown", throttle.Outcome(len(o)).String())
}
