package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// fakeServer is a store whose clock the test sets before each call: a
// Memory store under a paced limit, so that its slots come with delays.
type fakeServer struct {
	t     *testing.T
	clock time.Time // the store's clock at the next decision
	st    store.Store
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{t: t}
	st, err := store.NewMemory(store.WithClock(func() time.Time { return f.clock }))
	require.NoError(t, err)
	f.st = st
	return f
}

// TestStoreClockBoundsHoldTheSlot: a store whose clock runs at an offset
// that drifts (up to the drift assumed) and answers over round trips of
// random, lopsided lengths: every slot placed falls within [due, at] on the
// process's clock (to within the drift over its wait), and the bounds
// narrow to about the fastest round trip rather than the one that gave the
// slot.
func TestStoreClockBoundsHoldTheSlot(t *testing.T) {
	t.Parallel()
	for _, drift := range []float64{0, 400e-6, -900e-6} {
		srv := newFakeServer(t)
		rng := rand.New(rand.NewPCG(7, uint64(drift*1e9)))
		base := time.Unix(1_700_000_000, 0)
		c := &storeClock{drift: clockDrift, base: base}
		theta := func(local time.Time) time.Duration { // store − local
			return 3*time.Hour + time.Duration(drift*float64(local.Sub(base)))
		}
		now := base
		wide := 0
		for i := range 2000 {
			now = now.Add(time.Duration(rng.IntN(20_000_000))) // 10ms between calls on average: some wait
			fwd := time.Duration(50_000 + rng.ExpFloat64()*300_000)
			back := time.Duration(50_000 + rng.ExpFloat64()*300_000)
			if i%50 == 0 {
				fwd += 5 * time.Millisecond // a slow call now and then
			}
			decided := now.Add(fwd)
			res, slot := srv.reserve("k", decided.Add(theta(decided)))
			replied := decided.Add(back)
			due, at := c.place("k", res, now, replied)
			// The slot on this process's clock: slot − θ there.
			local := slot.Add(-theta(decided))
			local = slot.Add(-theta(local))
			// As the store's Delay, the bounds take the clocks to run at
			// one rate until the slot: off by the drift over the wait.
			tol := time.Microsecond + time.Duration(math.Abs(drift)*float64(res.Delay))
			require.False(t, local.Before(due.Add(-tol)), "drift %v, call %d: due %v after the slot", drift, i, due.Sub(local))
			require.False(t, local.After(at.Add(tol)), "drift %v, call %d: at %v before the slot", drift, i, local.Sub(at))
			if i >= 100 && at.Sub(due) > time.Millisecond {
				wide++
			}
			now = replied
		}
		assert.Less(t, wide, 40, "drift %v: bounds wider than 1ms (besides the drift over the wait) once samples came (one call in 50 is 5ms slow)", drift)
	}
}

// TestStoreClockStartsAnewOnAStep: a sample that misses the bounds (the
// store's clock stepped) replaces them, so the next slots fall within them
// again.
func TestStoreClockStartsAnewOnAStep(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	base := time.Unix(1_700_000_000, 0)
	c := &storeClock{drift: clockDrift, base: base}
	now := base
	place := func(theta time.Duration) {
		t.Helper()
		now = now.Add(10 * time.Millisecond)
		decided := now.Add(100 * time.Microsecond)
		res, slot := srv.reserve("k", decided.Add(theta))
		replied := decided.Add(100 * time.Microsecond)
		due, at := c.place("k", res, now, replied)
		local := slot.Add(-theta)
		assert.True(t, !local.Before(due) && !local.After(at), "θ %v: due %v at %v slot %v", theta, due, at, local)
		now = replied
	}
	for range 5 {
		place(time.Hour)
	}
	place(time.Hour - 30*time.Millisecond) // the store's clock went back
	place(time.Hour - 30*time.Millisecond)
	place(time.Hour + time.Second) // and forth
}

// TestStoreClockPerKey: a sharded store's keys live on servers of their own
// clocks, and their bounds do not mix.
func TestStoreClockPerKey(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	base := time.Unix(1_700_000_000, 0)
	c := &storeClock{perKey: true, drift: clockDrift, base: base}
	now := base.Add(time.Second)
	for i, theta := range []time.Duration{time.Hour, time.Hour + 40*time.Millisecond} {
		res, slot := srv.reserve(fmt.Sprint(i), now.Add(theta))
		due, at := c.place([]string{"a", "b"}[i], res, now, now)
		assert.Equal(t, slot.Add(-theta), due)
		assert.Equal(t, due, at)
	}
	now = now.Add(time.Millisecond)
	res, slot := srv.reserve("2", now.Add(time.Hour))
	due, at := c.place("a", res, now.Add(-50*time.Microsecond), now.Add(50*time.Microsecond))
	assert.WithinDuration(t, slot.Add(-time.Hour), due, 2*time.Microsecond, "a's bounds (aged 1ms), not b's")
	assert.WithinDuration(t, slot.Add(-time.Hour), at, 2*time.Microsecond)
}

// TestStoreClockKeepsBoundsThroughAStall: after a second with no reply, a
// reply a second wide (the store was paused) meets the bounds of before,
// aged by the drift, rather than replacing them: the slot is placed to
// within them, and the next reservation's spread is theirs, not the
// stall's. A sample far slower than the recent ones does not set the spread
// of a key without fresh bounds either.
func TestStoreClockKeepsBoundsThroughAStall(t *testing.T) {
	t.Parallel()
	srv := newFakeServer(t)
	base := time.Unix(1_700_000_000, 0)
	c := &storeClock{perKey: true, drift: clockDrift, base: base}
	const theta, rtt = time.Hour, 200 * time.Microsecond
	now := base
	call := func(key string, fwd, back time.Duration) (due, at time.Time) {
		t.Helper()
		decided := now.Add(fwd)
		res, _ := srv.reserve(key, decided.Add(theta))
		replied := decided.Add(back)
		due, at = c.place(key, res, now, replied)
		now = replied
		return due, at
	}
	for range 20 {
		now = now.Add(10 * time.Millisecond)
		call("k", rtt/2, rtt/2)
	}
	assert.Equal(t, rtt, c.spread("k", now))
	call("idle", rtt/2, rtt/2) // another key, last heard of now

	const stall = 1100 * time.Millisecond
	due, at := call("k", stall, rtt/2) // asked as the stall began
	// Aged over the 1.1003s since the last reply of "k": by 1.1003ms on
	// the side the stall's sample leaves open.
	aged := rtt + time.Duration(int64(stall+3*rtt/2)*clockDrift/1e6)
	assert.Equal(t, aged, at.Sub(due), "the bounds of before, aged, not the stall's")
	assert.Equal(t, aged, c.spread("k", now))

	now = now.Add(2 * time.Second) // "idle"'s bounds are stale
	assert.Equal(t, 4*rtt, c.spread("idle", now), "no more than 4 × the fastest recent round trip")
}

// reserve decides a reservation at the store's clock at, and returns it
// with its slot on the store's clock.
func (f *fakeServer) reserve(key string, at time.Time) (contract.Reservation, time.Time) {
	f.t.Helper()
	f.clock = at
	res, err := f.st.Reserve(context.Background(), key, contract.Request{Limits: []contract.Limit{{N: 100, Per: time.Second, Paced: true}}, Cost: 1, MaxWait: time.Hour})
	require.NoError(f.t, err)
	require.True(f.t, res.Allowed)
	return res, time.UnixMicro(res.Decided()).Add(res.Delay)
}
