package throttle_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestShapeChange: a 429 although the throttle kept the rule's window limit
// moves the key, fleet-wide, to a pace at the rule's rate without a burst:
// after a pause of two spacings (the upstream stated none), requests are
// spaced, on this transport and on another sharing the store. A later 429
// to a request sent under the pace slows it by 1 %, after two of its
// spacings.
func TestShapeChange(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, ""), ok200, ok200, ok200, ok200, ok200, answer(429, ""), ok200}}
		var fbs feedbackLog
		a := newTransport(t, up, st, fbs.option(), rule(nil)) // PerSecond(10), NoMargin
		b := newTransport(t, up, st, rule(nil))
		send := func(tr http.RoundTripper) time.Duration {
			return elapsed(func() {
				_, err := do(t, tr, context.Background())
				require.NoError(t, err)
			})
		}
		assert.Zero(t, send(a), "the 429")
		got := fbs.all()
		require.Len(t, got, 1)
		assert.Equal(t, throttle.Paced(10, time.Second, 0), got[0].Paced)
		assert.Equal(t, 200*time.Millisecond, got[0].Pause, "two spacings, not a window")

		var waits []time.Duration
		for _, tr := range []http.RoundTripper{a, b, a, b, a} {
			waits = append(waits, send(tr))
		}
		ms := time.Millisecond
		assert.Equal(t, []time.Duration{200 * ms, 100 * ms, 100 * ms, 100 * ms, 100 * ms}, waits,
			"the pause, then one every 100ms on both transports: no burst of the window's 10")

		assert.Equal(t, 100*ms, send(a), "paced; answered 429")
		got = fbs.all()
		require.Len(t, got, 2)
		assert.Equal(t, throttle.Paced(10, 1010*ms, 0), got[1].Paced, "sent under the pace: slowed by 1 %")
		assert.Equal(t, 202*ms, got[1].Pause, "two of its spacings, not a window")
		assert.Equal(t, 202*ms, send(a))
		assert.Equal(t, 101*ms, send(b), "the slower pace, fleet-wide")
		fs := a.Stats().Total().Upstream
		assert.Equal(t, uint64(2), fs.Reshapes)
		assert.Equal(t, uint64(2), fs.Pauses)
		assert.Equal(t, uint64(2), fs.TooManyRequests)
	})
}

// TestShapeSlowedBySpread: a 429 under the learned pace slows it by the
// spread this transport measured from its slots to the answers (one answer
// came 4ms after its slot, the others at once), not by 1 %.
func TestShapeSlowedBySpread(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		late := func(r *http.Request) *http.Response {
			time.Sleep(4 * ms)
			return ok200(r)
		}
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, ""), ok200, late, ok200, answer(429, ""), ok200}}
		var fbs feedbackLog
		a := newTransport(t, up, newMemory(t), fbs.option(), rule(func(r *throttle.Rule) { r.Margin = 10 * ms }))
		for range 5 {
			_, err := do(t, a, context.Background())
			require.NoError(t, err)
		}
		got := fbs.all()
		require.Len(t, got, 2)
		assert.Equal(t, throttle.Paced(10, 1010*ms, 0), got[0].Paced, "moved: the rule's rate, its margin included")
		assert.Equal(t, throttle.Paced(10, 1010*ms+10*4*ms, 0), got[1].Paced, "slowed by the spread measured: 4ms a request")
	})
}

// A 429 with a stated wait keeps it whole; a rule already paced without a
// burst is slowed by 1 % at its first 429.
func TestShapeChangeKeepsStatedWaits(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, "", "Retry-After", "1"), ok200}}
		var fbs feedbackLog
		tr := newTransport(t, up, nil, fbs.option(), rule(nil))
		_, err := do(t, tr, context.Background())
		require.NoError(t, err)
		got := fbs.all()
		require.Len(t, got, 1)
		assert.Equal(t, time.Second, got[0].Pause)
		assert.Equal(t, throttle.Paced(10, time.Second, 0), got[0].Paced)

		up = &scripted{answers: []func(*http.Request) *http.Response{answer(429, ""), ok200}}
		fbs = feedbackLog{}
		tr = newTransport(t, up, nil, fbs.option(), rule(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{throttle.Paced(10, time.Second, 0)}
		}))
		_, err = do(t, tr, context.Background())
		require.NoError(t, err)
		got = fbs.all()
		require.Len(t, got, 1)
		assert.Equal(t, throttle.Paced(10, 1010*time.Millisecond, 0), got[0].Paced, "slowed by 1 %")
		assert.Equal(t, 202*time.Millisecond, got[0].Pause)
		assert.Equal(t, uint64(1), tr.Stats().Total().Upstream.Reshapes)
	})
}

// TestDefaultShape: a rule that states no shape sends one every
// (Per + Margin)/N from its first request, on every transport that shares
// the store, and a burst of DefaultBurst + 1 only after it idled (the burst
// is earned): a GCRA every common server-side limiter accepts, within the
// window limit. With NoDefaultPace, the window's N go at once.
func TestDefaultShape(t *testing.T) {
	t.Parallel()
	spacing := (time.Second + throttle.DefaultMargin) / 100
	for _, c := range []struct {
		name   string
		bursts bool
	}{
		{"default: evenly spaced from the first, a burst once earned", false},
		{"NoDefaultPace: the whole window at once", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemory(t)
				r := throttle.Rule{Host: "api.example.com", Key: throttle.Fixed("k"), Limits: []throttle.Limit{throttle.PerSecond(100)}, NoDefaultPace: c.bursts}
				var sa, sb sendLog
				a := newTransport(t, sa.base(), st, throttle.WithRule(r))
				b := newTransport(t, sb.base(), st, throttle.WithRule(r))
				start := time.Now()
				var at []time.Duration
				send := func(n int) {
					for i := range n {
						tr := a
						if i%2 == 1 {
							tr = b
						}
						_, err := do(t, tr, context.Background())
						require.NoError(t, err)
						at = append(at, time.Since(start))
					}
				}
				send(120)
				for i := 100; i < len(at); i++ {
					assert.GreaterOrEqual(t, at[i]-at[i-100], time.Second+throttle.DefaultMargin, "the window, at request %d", i)
				}
				if c.bursts {
					for i := range 100 {
						assert.Zero(t, at[i], "request %d", i)
					}
					assert.NotZero(t, at[100])
					return
				}
				for i := range 100 {
					assert.Equal(t, time.Duration(i)*spacing, at[i], "request %d", i)
				}
				// Idle for a window: the burst is earned.
				time.Sleep(time.Second)
				idle := time.Since(start)
				send(throttle.DefaultBurst + 2)
				for i := 120; i < 120+throttle.DefaultBurst+1; i++ {
					assert.Equal(t, idle, at[i], "request %d: in the burst", i)
				}
				assert.Equal(t, idle+spacing, at[len(at)-1], "then the spacing")
				// A GCRA of the window's spacing and a burst of DefaultBurst:
				// any two requests i < j are at least j-i-DefaultBurst
				// spacings apart.
				for j := range at {
					for i := range j {
						if k := j - i - throttle.DefaultBurst; k > 0 {
							require.GreaterOrEqual(t, at[j]-at[i], time.Duration(k)*spacing, "requests %d and %d", i, j)
						}
					}
				}
			})
		})
	}
}

// TestShapeProbesBack: a pace slowed by a 429 returns to the rule's rate
// once no 429 came for the quiet time (5s): the next response probes it,
// and the slots are spaced at the rule's rate again, never faster.
func TestShapeProbesBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, ""), ok200, answer(429, ""), ok200, ok200, ok200, ok200, ok200, ok200}}
		a := newTransport(t, up, st, rule(nil)) // PerSecond(10), NoMargin
		send := func() time.Duration {
			return elapsed(func() {
				_, err := do(t, a, context.Background())
				require.NoError(t, err)
			})
		}
		ms := time.Millisecond
		assert.Equal(t, []time.Duration{0, 200 * ms, 100 * ms, 202 * ms, 101 * ms}, []time.Duration{send(), send(), send(), send(), send()},
			"moved, then slowed by 1 % by the second 429")
		time.Sleep(5 * time.Second)
		assert.Zero(t, send(), "quiet for 5s: this response probes")
		assert.Equal(t, []time.Duration{101 * ms, 100 * ms, 100 * ms}, []time.Duration{send(), send(), send()},
			"after the slot placed before the probe, back at the rule's rate, and no faster")
	})
}

// TestShapeProbeReported: the probe that speeds a slowed pace back up
// reports it (Feedback.Eased, with the pace now) once, and Stats count it.
func TestShapeProbeReported(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		up := &scripted{answers: []func(*http.Request) *http.Response{answer(429, ""), ok200, answer(429, ""), ok200, ok200, ok200}}
		var fbs feedbackLog
		a := newTransport(t, up, st, fbs.option(), rule(nil)) // PerSecond(10), NoMargin
		for range 5 {
			_, err := do(t, a, context.Background())
			require.NoError(t, err)
		}
		require.Len(t, fbs.all(), 2, "the two 429s")
		assert.Zero(t, a.Stats().Total().Upstream.Easings)
		time.Sleep(5 * time.Second)
		_, err := do(t, a, context.Background()) // quiet for 5s: this response probes
		require.NoError(t, err)
		got := fbs.all()
		require.Len(t, got, 3)
		assert.True(t, got[2].Eased)
		assert.Equal(t, throttle.Paced(10, time.Second, 0), got[2].Paced, "back at the rule's rate (within 1 %)")
		assert.Zero(t, got[2].Margin)
		assert.Equal(t, uint64(1), a.Stats().Total().Upstream.Easings)
		assert.Zero(t, a.Stats().Total().Upstream.Widenings)
	})
}
