package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// tokens is a request of one unit of its own key (2 per second: at most
// the two first) and cost tokens of a unit under limits.
func tokens(cost int, maxWait time.Duration, limits ...contract.Limit) contract.Request {
	r := req(1, maxWait, lim(1000, time.Second))
	r.Also = []contract.Part{{Unit: "tokens", Cost: cost, Limits: limits}}
	return r
}

func settle(t *testing.T, s store.Store, res contract.Reservation, actual ...int64) {
	t.Helper()
	require.NoError(t, s.Settle(ctx, res, actual))
}

// TestConformanceUnits runs the cases of a cost per limit (Part.Unit) and
// its settlement on every store.
func TestConformanceUnits(t *testing.T) { runCases(t, unitCases) }

var unitCases = []conformanceCase{
	{"a unit counts weighted entries: one request of 40 against 100 per second", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(100, time.Second)
		require.True(t, reserve(t, s, key, tokens(40, 0, l)).Allowed)
		clock.Advance(100 * time.Millisecond)
		require.True(t, reserve(t, s, key, tokens(40, 0, l)).Allowed)
		clock.Advance(100 * time.Millisecond)
		res := reserve(t, s, key, tokens(40, 0, l))
		require.False(t, res.Allowed, "80 + 40 > 100")
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 1, res.Part)
		assert.Equal(t, 0, res.Limit)
		assert.Equal(t, 800*time.Millisecond, res.RetryAfter, "the first leaves the window")
		res = reserve(t, s, key, tokens(20, 0, l))
		assert.True(t, res.Allowed, "80 + 20 fits")
		res = reserve(t, s, key, tokens(0, 0, l))
		assert.True(t, res.Allowed, "a cost of 0 always fits")
		res = reserve(t, s, key, tokens(1, time.Hour, l))
		require.True(t, res.Allowed)
		assert.Equal(t, 800*time.Millisecond, res.Delay)
	}},
	{"a refund gives back units, an overrun moves the next slot", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(100, time.Second)
		first := reserve(t, s, key, tokens(60, 0, l))
		require.True(t, first.Allowed)
		require.Len(t, first.Units, 1)
		assert.Equal(t, contract.Unit{Name: "tokens", Cost: 60}, first.Units[0])
		clock.Advance(100 * time.Millisecond)
		require.False(t, reserve(t, s, key, tokens(60, 0, l)).Allowed)
		settle(t, s, first, 10)
		second := reserve(t, s, key, tokens(60, 0, l))
		require.True(t, second.Allowed, "10 + 60 fits after the refund")
		clock.Advance(100 * time.Millisecond)
		require.True(t, reserve(t, s, key, tokens(30, 0, l)).Allowed, "10 + 60 + 30")
		// The second charged 90, not 60: 90 + 30 leave no unit free
		// until the second leaves the window, at 100ms + 1s.
		settle(t, s, second, 90)
		res := reserve(t, s, key, tokens(1, time.Hour, l))
		require.True(t, res.Allowed)
		assert.Equal(t, 900*time.Millisecond, res.Delay)
	}},
	{"a settlement of an entry that left the log changes nothing", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(100, time.Second)
		first := reserve(t, s, key, tokens(50, 0, l))
		clock.Advance(2 * time.Second)
		for range 20 {
			require.True(t, reserve(t, s, key, tokens(1, 0, l)).Allowed)
		}
		settle(t, s, first, 100)
		assert.True(t, reserve(t, s, key, tokens(79, 0, l)).Allowed)
	}},
	{"cancel gives a unit's cost back", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(100, time.Second)
		res := reserve(t, s, key, tokens(70, 0, l))
		require.True(t, res.Allowed)
		require.False(t, reserve(t, s, key, tokens(70, 0, l)).Allowed)
		require.NoError(t, s.Cancel(ctx, res))
		assert.True(t, reserve(t, s, key, tokens(70, 0, l)).Allowed)
	}},
	{"a paced unit is a token bucket of the unit; its settlement moves the time", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		// 100 tokens per second, a bucket of 100: one token every 10ms.
		p := contract.Limit{N: 100, Per: time.Second, Paced: true, Burst: 99}
		first := reserve(t, s, key, tokens(60, 0, p))
		require.True(t, first.Allowed)
		assert.Equal(t, int64(10_000), first.Units[0].Spacing)
		res := reserve(t, s, key, tokens(60, 0, p))
		require.False(t, res.Allowed, "60 + 60 > the bucket")
		assert.Equal(t, 200*time.Millisecond, res.RetryAfter)
		assert.Equal(t, 1, res.Part)
		// The newest entry: its refund gives the time back.
		settle(t, s, first, 10)
		second := reserve(t, s, key, tokens(60, 0, p))
		require.True(t, second.Allowed, "10 + 60 fits")
		third := reserve(t, s, key, tokens(20, 0, p))
		require.True(t, third.Allowed, "10 + 60 + 20 fits")
		// Not the newest any more: its refund stays spent, its overrun counts.
		settle(t, s, second, 0)
		require.False(t, reserve(t, s, key, tokens(20, 0, p)).Allowed, "no refund behind a later reservation")
		settle(t, s, third, 50)
		res = reserve(t, s, key, tokens(1, time.Hour, p))
		require.True(t, res.Allowed)
		// TAT: 10 + 60 + 20 + 30 units = 1.2s; a cost of 1 goes at TAT - 99 units.
		assert.Equal(t, 210*time.Millisecond, res.Delay)
	}},
	{"the unit's log holds one entry per request, whatever the cost", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(2_000_000, time.Minute)
		for range 10 {
			require.True(t, reserve(t, s, key, tokens(150_000, 0, l)).Allowed)
		}
		assert.False(t, reserve(t, s, key, tokens(500_001, 0, l)).Allowed)
		assert.True(t, reserve(t, s, key, tokens(500_000, 0, l)).Allowed)
	}},
	{"a cost above a unit's N is an invalid request", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		_, err := s.Reserve(ctx, key, tokens(101, 0, lim(100, time.Second)))
		assert.ErrorIs(t, err, contract.ErrInvalidRequest)
		res := reserve(t, s, key, tokens(10, 0, lim(100, time.Second)))
		err = s.Settle(ctx, res, []int64{-1})
		assert.True(t, errors.Is(err, contract.ErrInvalidRequest))
		err = s.Settle(ctx, res, nil)
		assert.True(t, errors.Is(err, contract.ErrInvalidRequest))
	}},
}
