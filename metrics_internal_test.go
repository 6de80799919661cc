package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestWaitBucket: a wait falls in the first bucket whose bound is at least
// the wait; none in the first, too long ones in the last.
func TestWaitBucket(t *testing.T) {
	t.Parallel()
	bounds := waitBounds[:]
	assert.Equal(t, numWaitBuckets, len(bounds)+1)
	assert.Equal(t, time.Duration(0), bounds[0])
	assert.Equal(t, time.Millisecond, bounds[1])
	assert.Equal(t, 65536*time.Millisecond, bounds[len(bounds)-1])
	for _, tc := range []struct {
		name string
		d    time.Duration
		want int
	}{
		{"none", 0, 0},
		{"negative", -time.Second, 0},
		{"a nanosecond", 1, 1},
		{"1ms", time.Millisecond, 1},
		{"just above 1ms", time.Millisecond + 1, 2},
		{"2ms", 2 * time.Millisecond, 2},
		{"3ms", 3 * time.Millisecond, 3},
		{"1s and a margin", time.Second + 5*time.Millisecond, 11},
		{"the last bound", 65536 * time.Millisecond, len(bounds) - 1},
		{"above every bound", 65536*time.Millisecond + 1, len(bounds)},
		{"a year", 366 * 24 * time.Hour, len(bounds)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := waitBucket(tc.d)
			assert.Equal(t, tc.want, got)
			if got < len(bounds) {
				assert.LessOrEqual(t, tc.d, bounds[got])
			}
			if got > 0 {
				assert.Greater(t, tc.d, bounds[got-1])
			}
		})
	}
}

// TestWaitBoundsAreACopy: a caller cannot change the bounds of the next
// snapshot, nor those of another snapshot.
func TestWaitBoundsAreACopy(t *testing.T) {
	t.Parallel()
	var s ruleStats
	a, b := s.snapshot(), s.snapshot()
	a.Wait.Bounds[1] = time.Hour
	assert.Equal(t, time.Millisecond, b.Wait.Bounds[1])
	assert.Equal(t, time.Millisecond, s.snapshot().Wait.Bounds[1])
	total := Stats{Unmatched: b}.Total()
	total.Wait.Bounds[1] = time.Hour
	assert.Equal(t, time.Millisecond, b.Wait.Bounds[1])
}

// BenchmarkRecord is what counting costs a request: one atomic add when
// sent at once or refused, two after a wait.
func BenchmarkRecord(b *testing.B) {
	for _, c := range []struct {
		name string
		d    Decision
	}{
		{"sent", Decision{Outcome: Sent}},
		{"sent after a wait", Decision{Outcome: Sent, Delay: 3 * time.Millisecond}},
		{"limited", Decision{Outcome: Limited}},
	} {
		d := c.d
		b.Run(c.name, func(b *testing.B) {
			var s ruleStats
			b.ReportAllocs()
			for b.Loop() {
				s.record(d)
			}
		})
	}
}

// TestRecordDoesNotAllocate: counting a decision allocates nothing, on any
// path.
func TestRecordDoesNotAllocate(t *testing.T) {
	var s ruleStats
	for _, d := range []Decision{
		{Outcome: Sent}, {Outcome: Sent, Delay: time.Second, Retaken: 1}, {Outcome: Limited},
		{Outcome: FailedOpen}, {Outcome: Sent, Local: true}, {Outcome: Canceled},
	} {
		assert.Zero(t, testing.AllocsPerRun(100, func() { s.record(d) }), d.Outcome.String())
	}
}
