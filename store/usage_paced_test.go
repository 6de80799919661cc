package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// usagePacedCases: Usage under a paced limit, a learned pace and a limit
// that starts slowly says the slot the next reservation gets, on every store.
var usagePacedCases = []conformanceCase{
	{"paced: next and the burst spent", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		// 10/s paced with a burst of 2: a spacing of 100ms, 3 at once.
		r := req(1, 10*time.Second, lim(100, 10*time.Second), paced(10, time.Second, 2))
		for range 4 {
			require.True(t, reserve(t, s, key, r).Allowed)
		}
		u := usage(t, s, key, r)
		assert.Equal(t, []contract.LimitUsage{
			{Limit: lim(100, 10*time.Second), Used: 3, Reserved: 1},
			{Limit: paced(10, time.Second, 2), Used: 3, Reserved: 1},
		}, u.Limits)
		assert.Equal(t, 200*time.Millisecond, u.Next)
		assert.Equal(t, contract.CauseLimit, u.NextCause)
		assert.Equal(t, 1, u.NextLimit)
		assert.Equal(t, u.Next, reserve(t, s, key, r).Delay, "the next reservation goes at Next")

		clock.Advance(350 * time.Millisecond) // TAT at 500ms: 150ms ahead
		u = usage(t, s, key, r)
		assert.Equal(t, contract.LimitUsage{Limit: paced(10, time.Second, 2), Used: 2}, u.Limits[1])
		assert.Equal(t, time.Duration(0), u.Next)
		assert.Equal(t, contract.CauseNone, u.NextCause)
	}},
	{"paced alone: no log", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 10*time.Second, paced(4, time.Second, 0))
		for range 3 {
			require.True(t, reserve(t, s, key, r).Allowed)
		}
		u := usage(t, s, key, r)
		assert.Equal(t, []contract.LimitUsage{{Limit: paced(4, time.Second, 0), Used: 1, Reserved: 2}}, u.Limits)
		assert.Equal(t, 750*time.Millisecond, u.Next)
		assert.Equal(t, contract.CauseLimit, u.NextCause)
		assert.Equal(t, 0, u.NextLimit)
		assert.Zero(t, u.Entries)
		assert.Equal(t, u.Next, reserve(t, s, key, r).Delay)
	}},
	{"paced: a learned pace", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 10*time.Second, lim(100, 10*time.Second))
		require.True(t, reserve(t, s, key, r).Allowed)
		require.NoError(t, s.(contract.Feedback).Learn(ctx, key, contract.Learned{Pace: paced(4, time.Second, 0), PaceTTL: time.Minute}))
		u := usage(t, s, key, r)
		assert.Equal(t, contract.Limit{N: 1, Per: 250 * time.Millisecond, Paced: true}, u.LearnedPace)
		assert.Equal(t, time.Minute, u.LearnedPaceFor)
		// No pace time yet: free now; then spaced 250ms.
		assert.Equal(t, time.Duration(0), u.Next)
		require.True(t, reserve(t, s, key, r).Allowed)
		u = usage(t, s, key, r)
		assert.Equal(t, 250*time.Millisecond, u.Next)
		assert.Equal(t, contract.CauseLearned, u.NextCause)
		assert.Equal(t, []contract.LimitUsage{{Limit: lim(100, 10*time.Second), Used: 2}}, u.Limits)
		assert.Equal(t, u.Next, reserve(t, s, key, r).Delay)

		// Beside a paced limit of the request's own, the stricter spacing.
		clock.Advance(time.Second)
		rp := req(1, 10*time.Second, lim(100, 10*time.Second), paced(10, time.Second, 2))
		require.True(t, reserve(t, s, key, rp).Allowed)
		u = usage(t, s, key, rp)
		assert.Equal(t, 250*time.Millisecond, u.Next)
		assert.Equal(t, contract.CauseLearned, u.NextCause)
		assert.Equal(t, contract.LimitUsage{Limit: paced(10, time.Second, 2), Used: 3}, u.Limits[1],
			"counted at the limit's own spacing and burst: 250ms ahead is 3 of its 100ms")
		assert.Equal(t, u.Next, reserve(t, s, key, rp).Delay)
	}},
	{"paced: slow start", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		p := paced(10, time.Second, 4)
		p.SlowStart = true
		r := req(1, 10*time.Second, lim(100, 10*time.Second), p)
		// No pace time: the burst is not earned yet, one may go now.
		u := usage(t, s, key, r)
		assert.Equal(t, contract.LimitUsage{Limit: p, Used: 4}, u.Limits[1])
		assert.Equal(t, time.Duration(0), u.Next)
		require.True(t, reserve(t, s, key, r).Allowed)
		u = usage(t, s, key, r)
		assert.Equal(t, contract.LimitUsage{Limit: p, Used: 5}, u.Limits[1])
		assert.Equal(t, 100*time.Millisecond, u.Next)
		assert.Equal(t, contract.CauseLimit, u.NextCause)
		assert.Equal(t, 1, u.NextLimit)
		assert.Equal(t, u.Next, reserve(t, s, key, r).Delay)

		// Idle for less than the window past the pace time: the burst is earned.
		clock.Advance(1200 * time.Millisecond)
		u = usage(t, s, key, r)
		assert.Equal(t, contract.LimitUsage{Limit: p, Used: 0}, u.Limits[1])
		// Idle for longer: as a key without a pace time again.
		clock.Advance(time.Second)
		u = usage(t, s, key, r)
		assert.Equal(t, contract.LimitUsage{Limit: p, Used: 4}, u.Limits[1])
		assert.Equal(t, time.Duration(0), u.Next)

		// A pause holds the slot, and its end earns no burst.
		require.NoError(t, s.(contract.Feedback).Pause(ctx, key, time.Second))
		u = usage(t, s, key, r)
		assert.Equal(t, time.Second, u.Next)
		assert.Equal(t, contract.CauseUpstream, u.NextCause)
		assert.Equal(t, u.Next, reserve(t, s, key, r).Delay)
		u = usage(t, s, key, r)
		assert.Equal(t, time.Second+100*time.Millisecond, u.Next)
		assert.Equal(t, u.Next, reserve(t, s, key, r).Delay)
	}},
}

func TestUsagePaced(t *testing.T) { runCases(t, usagePacedCases) }
