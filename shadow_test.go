package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

// shadowCounts is what a rule did, or would have done, to one traffic.
type shadowCounts struct {
	decisions, waited, limited int
	waitSum                    time.Duration
}

// arrivals is an open-loop traffic of 2,000 requests over about 24 s: calm,
// busy, a burst, and calm again. Each request starts at its arrival, whatever
// the ones before it waited, so that two transports see the same traffic.
func arrivals() []time.Duration {
	var at []time.Duration
	t := time.Duration(0)
	add := func(n int, gap time.Duration) {
		for range n {
			at = append(at, t)
			t += gap
		}
	}
	add(400, 25*time.Millisecond) // 40/s: under both limits
	add(600, 12*time.Millisecond) // 83/s: waits under 50/s
	add(200, 0)                   // a burst: refusals under 50/s with MaxWait
	t += 3 * time.Second
	add(800, 8*time.Millisecond) // 125/s: waits and refusals under both
	return at
}

// runTraffic sends arrivals() through a Transport of rules on a fresh memory
// store, on the synctest clock, and counts the decisions of the rule named
// name.
func runTraffic(t *testing.T, name string, rules ...throttle.Rule) shadowCounts {
	t.Helper()
	var c shadowCounts
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		opts := []throttle.Option{throttle.WithOnDecision(func(d throttle.Decision) {
			if d.Rule != name {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			c.decisions++
			switch {
			case d.Outcome == throttle.Limited:
				c.limited++
			case d.Outcome == throttle.Sent && d.Delay > 0:
				c.waited++
				c.waitSum += d.Delay
			}
		})}
		for _, r := range rules {
			opts = append(opts, throttle.WithRule(r))
		}
		st, err := store.NewMemory()
		require.NoError(t, err)
		tr, err := throttle.New(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			return okResponse(req), nil
		}), st, opts...)
		require.NoError(t, err)
		throttle.Measured(tr)
		var wg sync.WaitGroup
		start := time.Now()
		for _, at := range arrivals() {
			time.Sleep(time.Until(start.Add(at)))
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
				if resp, err := tr.RoundTrip(req); err == nil {
					_ = resp.Body.Close()
				}
			})
		}
		wg.Wait()
	})
	return c
}

// TestShadowRecordsWhatEnforcedWould: a shadow 50/s beside an enforced 100/s
// reports the waits and refusals an enforced 50/s rule makes in the same
// traffic, within 2 %.
func TestShadowRecordsWhatEnforcedWould(t *testing.T) {
	limits := []throttle.Limit{throttle.PerSecond(50)}
	const maxWait = 500 * time.Millisecond
	shadow := runTraffic(t, "try-50",
		throttle.Rule{Name: "api", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(100)}},
		throttle.Rule{Name: "try-50", Host: "api.example.com", Limits: limits, MaxWait: maxWait, Shadow: true})
	enforced := runTraffic(t, "try-50",
		throttle.Rule{Name: "try-50", Host: "api.example.com", Limits: limits, MaxWait: maxWait})
	t.Logf("shadow %+v; enforced %+v", shadow, enforced)

	require.Equal(t, len(arrivals()), enforced.decisions)
	require.Equal(t, enforced.decisions, shadow.decisions)
	require.Greater(t, enforced.waited, 100, "the traffic must make the 50/s rule wait")
	require.Greater(t, enforced.limited, 100, "the traffic must make the 50/s rule refuse")
	within := func(what string, want, got float64) {
		assert.InDelta(t, want, got, 0.02*want, "%s: shadow %v, enforced %v", what, got, want)
	}
	within("waits", float64(enforced.waited), float64(shadow.waited))
	within("refusals", float64(enforced.limited), float64(shadow.limited))
	within("time waited", enforced.waitSum.Seconds(), shadow.waitSum.Seconds())
}

// TestShadowConfig: what a shadow rule cannot be is a *ConfigError.
func TestShadowConfig(t *testing.T) {
	api := throttle.Rule{Name: "api", Host: "api.example.com", Limits: per(10)}
	shadow := func(f func(*throttle.Rule)) throttle.Rule {
		r := throttle.Rule{Name: "try", Host: "api.example.com", Limits: per(5), Shadow: true}
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name string
		opts []throttle.Option
	}{
		{"default rule", []throttle.Option{throttle.WithDefault(throttle.Rule{Limits: per(5), Shadow: true})}},
		{"in flight", []throttle.Option{throttle.WithRule(api), throttle.WithRule(shadow(func(r *throttle.Rule) { r.InFlight = 2 }))}},
		{"retries", []throttle.Option{throttle.WithRule(api), throttle.WithRule(shadow(func(r *throttle.Rule) { r.Retries = 1 }))}},
		{"an enforced rule's name", []throttle.Option{throttle.WithRule(api), throttle.WithRule(shadow(func(r *throttle.Rule) { r.Name = "api"; r.Limits = per(10) }))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := throttle.New(nil, newMemory(t), tc.opts...)
			require.True(t, isA[*throttle.ConfigError](err), "%v", err)
		})
	}
}

// TestShadowNeverHoldsBack: a shadow rule's refusal, its key's failure and
// its store's failure reach its decisions and counters, never the request,
// which its enforced rule (or none) decides alone.
func TestShadowNeverHoldsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var decisions decisionLog
		sends := 0
		base := roundTripperFunc(func(req *http.Request) (*http.Response, error) { sends++; return okResponse(req), nil })
		st := fakestore.New()
		tr, err := throttle.New(base, st, decisions.option(), throttle.WithUnmatchedSent(false),
			throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example.com", Limits: per(10), NoDefaultPace: true}),
			throttle.WithRule(throttle.Rule{Name: "try", Host: "*.example.com", Limits: per(1), FailFast: true, Shadow: true}),
			throttle.WithRule(throttle.Rule{Name: "try-token", Host: "other.example.com", PathPrefix: "/t", Limits: per(1), Key: throttle.ByBearerToken(), Shadow: true}))
		require.NoError(t, err)
		throttle.Measured(tr) // no allowance: the enforced rule's own sends go at once
		get := func(url string) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Zero(t, time.Since(start), "a shadow rule never delays")
		}
		for range 3 {
			get("http://api.example.com/")
		}
		get("http://other.example.com/t") // unmatched, sent; no bearer token: the shadow's key fails
		st.Fail(errors.New("down"), 0)
		get("http://other.example.com/") // unmatched, sent; the shadow's store failed
		assert.Equal(t, 5, sends)

		s := tr.Stats()
		byName := map[string]throttle.RuleStats{}
		for _, r := range s.Rules {
			byName[r.Rule] = r
		}
		assert.False(t, byName["api"].Shadow)
		assert.True(t, byName["try"].Shadow)
		assert.Equal(t, throttle.Outcomes{throttle.Sent: 3}, byName["api"].Requests)
		assert.Equal(t, throttle.Outcomes{throttle.Sent: 1, throttle.Limited: 2, throttle.Failed: 1}, byName["try"].Requests)
		assert.Equal(t, uint64(1), byName["try"].Store.Refused)
		assert.Equal(t, throttle.Outcomes{throttle.Failed: 1}, byName["try-token"].Requests)
		total := s.Total()
		assert.Equal(t, throttle.Outcomes{throttle.Sent: 3, throttle.Unmatched: 2}, total.Requests, "Total leaves shadow rules out")

		var shadowLimited int
		for _, d := range decisions.all() {
			if d.Rule == "try" && d.Outcome == throttle.Limited {
				shadowLimited++
				assert.True(t, d.Shadow)
				assert.ErrorIs(t, d.Err, throttle.ErrLimited, "the error it would have returned")
			}
			if d.Rule == "api" {
				assert.False(t, d.Shadow)
			}
		}
		assert.Equal(t, 2, shadowLimited)
	})
}

// TestShadowLimiter: a Limiter of a shadow rule lets every use go at once
// and records it, as its enforced twin would.
func TestShadowLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var decisions decisionLog
		l := newLimiter(t, nil, throttle.Rule{Limits: per(2), FailFast: true, Shadow: true}, decisions.option())
		ctx := context.Background()
		for range 3 {
			start := time.Now()
			require.NoError(t, l.Wait(ctx, "k", 1))
			assert.Zero(t, time.Since(start))
		}
		ok, err := l.Allow(ctx, "k", 1)
		require.NoError(t, err)
		assert.True(t, ok)
		rv, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		assert.Zero(t, rv.Delay())
		require.NoError(t, rv.Wait(ctx))
		s := l.Stats().Rules[0]
		assert.True(t, s.Shadow)
		assert.Equal(t, throttle.Outcomes{throttle.Sent: 2, throttle.Limited: 3}, s.Requests)
		require.Error(t, l.Wait(ctx, "", 1), "bad input is still an error")
	})
}

// TestShadowPublished: a shadow rule is published as one, with its key
// scheme once it has derived a key.
func TestShadowPublished(t *testing.T) {
	st := newMemory(t)
	tr := newTransport(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil }), st,
		throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Limits: per(10)}),
		throttle.WithRule(throttle.Rule{Name: "try", Host: "api.example", Limits: per(5), Shadow: true}))
	send(t, tr, "https://api.example/x")
	ps, err := operator.Published(context.Background(), st)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	require.Len(t, ps[0].Rules, 2)
	assert.False(t, ps[0].Rules[0].Shadow)
	assert.Equal(t, operator.PublishedRule{Name: "try", Match: "host api.example", Limits: per(5), Algorithm: throttle.SlidingLog,
		Margin: throttle.DefaultMargin, Key: "host", Shadow: true}, ps[0].Rules[1])
	require.NoError(t, tr.Close())
}
