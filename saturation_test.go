package throttle_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestRecent: RuleStats.Recent is the share of each limit this process
// used in its last window, and the mean wait of its recent sends.
func TestRecent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limits := []throttle.Limit{throttle.PerSecond(10), throttle.PerMinute(100)}
		l := newLimiter(t, nil, throttle.Rule{Limits: limits, NoDefaultPace: true})
		throttle.MeasuredLimiter(l)
		ctx := context.Background()
		recent := func() (used []float64, wait time.Duration) {
			r := l.Stats().Rules[0].Recent
			require.Equal(t, limits, r.Limits, "the rule's limits, without the default pace")
			return r.Used, r.Wait
		}
		used, wait := recent()
		assert.Equal(t, []float64{0, 0}, used, "nothing sent")
		assert.Zero(t, wait)

		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // the start of a second
		for range 5 {
			require.NoError(t, l.Wait(ctx, "k", 2))
		}
		used, wait = recent()
		assert.Equal(t, []float64{1, 0.1}, used, "10 of 10/s, 10 of 100/min")
		assert.Zero(t, wait)

		// The next 10 units wait for the first second's to leave the window.
		require.NoError(t, l.Wait(ctx, "k", 10))
		used, wait = recent()
		assert.InDelta(t, 1.0, used[0], 1e-9, "the second 10, at the start of the next second")
		assert.InDelta(t, 0.2, used[1], 1e-9)
		assert.Equal(t, (time.Second+throttle.DefaultMargin)/6, wait, "six sends, one waited a second and the margin")

		time.Sleep(800 * time.Millisecond)
		used, _ = recent()
		assert.InDelta(t, 1.0, used[0], 1e-9, "still in the last second")
		time.Sleep(200 * time.Millisecond)
		used, _ = recent()
		assert.Zero(t, used[0], "out of it")
		assert.InDelta(t, 0.2, used[1], 1e-9)
		time.Sleep(10 * time.Second)
		used, wait = recent()
		assert.Zero(t, wait, "no send in the last 10 s")
		assert.InDelta(t, 0.2, used[1], 1e-9, "the minute's window still holds them")
	})
}
