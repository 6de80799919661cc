package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSleepNeverEarly: sleep returns no earlier than asked, with a finisher
// free or not (the timer then takes the whole wait), on the real clock.
func TestSleepNeverEarly(t *testing.T) {
	ctx := context.Background()
	check := func() {
		for _, d := range []time.Duration{0, 50 * time.Microsecond, 900 * time.Microsecond, wakeLead, wakeLead + 300*time.Microsecond, 7 * time.Millisecond} {
			start := time.Now()
			require.NoError(t, PreciseSleep(ctx, d))
			assert.GreaterOrEqual(t, time.Since(start), d)
		}
	}
	check()
	for range cap(finishers) { // every finisher busy
		finishers <- struct{}{}
	}
	defer func() {
		for range cap(finishers) {
			<-finishers
		}
	}()
	check()
}

// TestSleepEndsWithItsContext: a context that ends before or during the
// wait ends it, with its error.
func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, PreciseSleep(ctx, time.Hour), context.Canceled)
	assert.ErrorIs(t, PreciseSleep(ctx, time.Millisecond), context.Canceled, "within the last stretch")
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, PreciseSleep(ctx, time.Hour), context.DeadlineExceeded)
}

// BenchmarkSleepLateness reports how late sleep and the runtime's timer
// alone wake (ns past the time asked): median, 99th percentile and most.
// On Linux the timer wakes up to a millisecond late (sleep.go).
//
//	go test -run '^$' -bench SleepLateness -benchtime 400x .
func BenchmarkSleepLateness(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		f    func(context.Context, time.Duration) error
	}{{"sleep", PreciseSleep}, {"timer", TimerSleep}} {
		b.Run(bc.name, func(b *testing.B) {
			late := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				d := 3*time.Millisecond + time.Duration(i*37%1000)*time.Microsecond
				start := time.Now()
				_ = bc.f(ctx, d)
				late = append(late, time.Since(start)-d)
			}
			slices.Sort(late)
			n := len(late)
			b.ReportMetric(float64(late[n/2]), "p50-late-ns")
			b.ReportMetric(float64(late[n*99/100]), "p99-late-ns")
			b.ReportMetric(float64(late[n-1]), "max-late-ns")
		})
	}
}
