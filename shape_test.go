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
// to a request sent under the pace pauses for the full window.
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
		assert.Equal(t, time.Second, got[1].Pause, "sent under the pace: the full window")
		assert.Equal(t, throttle.Paced(10, time.Second, 0), got[1].Paced, "renewed")
		assert.Equal(t, time.Second, send(a))
		fs := a.FeedbackStats()
		assert.Equal(t, uint64(2), fs.Reshapes)
		assert.Equal(t, uint64(2), fs.Pauses)
		assert.Equal(t, uint64(2), fs.TooManyRequests)
	})
}

// A 429 with a stated wait keeps it whole; a rule already paced without a
// burst learns no pace (nothing stricter at its rate).
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
		assert.Zero(t, got[0].Paced)
		assert.Equal(t, time.Second, got[0].Pause)
		assert.Zero(t, tr.FeedbackStats().Reshapes)
	})
}
