package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLatenessGuardedColdStart(t *testing.T) {
	t.Parallel()
	var l lateness
	l.guarded.Store(true)
	t0 := time.Unix(1_700_000_000, 0)
	assert.Equal(t, 2*time.Millisecond, l.allowance(t0, 2*time.Millisecond), "no sample yet: the cold allowance")
	l.observe(t0, 300*time.Microsecond, 2*time.Millisecond, false)
	assert.Equal(t, 300*time.Microsecond, l.allowance(t0, 2*time.Millisecond), "a wake-up ends it when the wire is guarded")
	l.observe(t0.Add(time.Millisecond), 4*time.Millisecond, 300*time.Microsecond, true)
	assert.Equal(t, 4*time.Millisecond, l.allowance(t0.Add(2*time.Millisecond), 2*time.Millisecond), "the wire, dial included")
}

func TestLatenessPeriods(t *testing.T) {
	t.Parallel()
	var l lateness
	t0 := time.Unix(1_700_000_000, 0)
	assert.Equal(t, initialAllowance, l.allowance(t0, time.Millisecond), "no sample yet: cautious")
	l.observe(t0, 3*time.Millisecond, time.Hour, false)
	assert.Equal(t, initialAllowance, l.allowance(t0, time.Millisecond), "a wake-up does not measure the wire")
	l.observe(t0.Add(time.Millisecond), 2*time.Millisecond, time.Hour, true)
	assert.Equal(t, 3*time.Millisecond, l.allowance(t0.Add(2*time.Millisecond), time.Millisecond), "measured on the wire: the largest sample")
	l.observe(t0.Add(1500*time.Millisecond), time.Millisecond, time.Hour, false)
	assert.Equal(t, 3*time.Millisecond, l.allowance(t0.Add(1600*time.Millisecond), time.Millisecond), "the previous period still counts")
	assert.Equal(t, 3*time.Millisecond, l.allowance(t0.Add(2600*time.Millisecond), time.Millisecond), "and earlier ones, while they hold fewer than tailShare samples")
	assert.Equal(t, 3*time.Millisecond, l.allowance(t0.Add(time.Hour), time.Millisecond), "an idle process remembers its last periods with samples")
	for i := range latenessPeriods - 1 {
		l.observe(t0.Add(time.Hour+time.Duration(i)*time.Second), 500*time.Microsecond, time.Hour, false)
	}
	assert.Equal(t, 500*time.Microsecond, l.allowance(t0.Add(time.Hour+latenessPeriods*time.Second), time.Millisecond), "until latenessPeriods newer periods have their own")
	for i := range tailShare {
		l.observe(t0.Add(2*time.Hour+time.Duration(i)*time.Millisecond), 100*time.Microsecond, time.Hour, false)
	}
	assert.Equal(t, 100*time.Microsecond, l.allowance(t0.Add(2*time.Hour+500*time.Millisecond), time.Millisecond), "with the previous period's, 201 samples: its 500µs is the 1 in 200 left out")
	l.observe(t0.Add(2*time.Hour+500*time.Millisecond), 300*time.Microsecond, time.Hour, false)
	assert.Equal(t, 300*time.Microsecond, l.allowance(t0.Add(2*time.Hour+500*time.Millisecond), time.Millisecond), "two in 202: covered")
	assert.Equal(t, 100*time.Microsecond, l.allowance(t0.Add(2*time.Hour+1500*time.Millisecond), time.Millisecond), "a period on, that period alone holds tailShare: the older ones no longer count, and its 300µs is left out")

	var stall lateness
	stall.observe(t0, time.Millisecond, time.Hour, true)
	stall.observe(t0, time.Minute, 2*time.Millisecond, false)
	assert.Equal(t, 28*time.Millisecond, stall.allowance(t0, time.Millisecond), "one stall raises it to at most 4 (allowance + DefaultMargin)")
	stall.observe(t0, time.Hour, time.Hour, false)
	assert.Equal(t, maxAllowance, stall.allowance(t0, time.Millisecond), "bounded")

	var idle lateness
	idle.observe(t0, time.Millisecond, time.Hour, false)
	assert.Equal(t, initialAllowance, idle.allowance(t0.Add(500*time.Millisecond), time.Millisecond), "no measurement on the wire yet")
	assert.Equal(t, time.Millisecond, idle.allowance(t0.Add(1500*time.Millisecond), time.Millisecond), "the caution lasts one period at most")
}

// TestLatenessLeavesOutTheTail: the allowance covers all but the latest 1
// in tailShare samples of the current and the previous period: one stall
// among a few hundred samples is left to its retake, while among fewer it
// is covered, and lateness that recurs more often is covered too.
func TestLatenessLeavesOutTheTail(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	feed := func(l *lateness, at time.Time, n int, late time.Duration) {
		for i := range n {
			l.observe(at.Add(time.Duration(i)*time.Microsecond), late, time.Hour, true)
		}
	}
	var few, many, often lateness
	for _, l := range []*lateness{&few, &many, &often} {
		l.guarded.Store(true)
	}
	feed(&few, t0, 1, 5*time.Millisecond)
	feed(&few, t0, 150, 100*time.Microsecond)
	assert.Equal(t, 5*time.Millisecond, few.allowance(t0.Add(time.Millisecond), 0), "151 samples: the largest")

	feed(&many, t0, 1, 5*time.Millisecond)
	feed(&many, t0, 399, 100*time.Microsecond)
	assert.Equal(t, 100*time.Microsecond, many.allowance(t0.Add(time.Millisecond), 0), "400 samples: the 3rd largest")
	feed(&many, t0.Add(1500*time.Millisecond), 10, 200*time.Microsecond)
	assert.Equal(t, 200*time.Microsecond, many.allowance(t0.Add(1600*time.Millisecond), 0), "the previous period's count still counts")
	assert.Equal(t, 200*time.Microsecond, many.allowance(t0.Add(2600*time.Millisecond), 0), "a period on, only the newer one's largest")

	feed(&often, t0, 10, 5*time.Millisecond)
	feed(&often, t0, 390, 100*time.Microsecond)
	assert.Equal(t, 5*time.Millisecond, often.allowance(t0.Add(time.Millisecond), 0), "10 in 400 are late: covered")
}

// TestLatenessUnguardedColdStart: a process whose sends are not watched on
// the wire (a Limiter, or a Transport whose base reports no connection)
// starts with the cautious initial allowance until it measures a send.
func TestLatenessUnguardedColdStart(t *testing.T) {
	t.Parallel()
	var l lateness
	t0 := time.Unix(1_700_000_000, 0)
	assert.Equal(t, initialAllowance, l.allowance(t0, DefaultMargin/2))
}
