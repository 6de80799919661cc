package throttle_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

// allowed counts the uses of l's key k that Allow lets go now, out of n.
func allowed(t *testing.T, l *throttle.Limiter, k string, n int) int {
	t.Helper()
	got := 0
	for range n {
		ok, err := l.Allow(context.Background(), k, 1)
		if err != nil {
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le)
		}
		if ok {
			got++
		}
	}
	return got
}

func overrideLimiter(t *testing.T, st store.Store, ls ...throttle.Limit) *throttle.Limiter {
	t.Helper()
	l, err := throttle.NewLimiter(st, throttle.Rule{Name: "api", Limits: ls, Margin: throttle.NoMargin, NoDefaultPace: true, FailFast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// TestOverrideLowersLimit: an override set by the operator reaches a
// running Limiter at its first request a second or more after it was set
// (that request still goes under the old limits); the reservations made
// under the old limit stay and the new one counts them; clearing it
// restores the rule's own limit, and the history says who changed what.
func TestOverrideLowersLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := newMemory(t)
		l := overrideLimiter(t, st, throttle.Per(10, 10*time.Second))
		assert.Equal(t, 8, allowed(t, l, "k", 8)) // the first request polls: no override
		require.NoError(t, operator.SetLimits(ctx, st, "api", operator.Override{Limits: []throttle.Limit{throttle.Per(5, 10*time.Second)}, By: "alice"}))

		time.Sleep(1100 * time.Millisecond)
		assert.Equal(t, 1, allowed(t, l, "k", 1), "the request that polls goes under the old limit")
		assert.Zero(t, allowed(t, l, "k", 5), "9 sent in the window, 5 allowed now")
		ps, err := operator.Published(ctx, st)
		require.NoError(t, err)
		require.Len(t, ps, 1)
		assert.Equal(t, []throttle.Limit{throttle.Per(5, 10*time.Second)}, ps[0].Rules[0].Override, "the process publishes the override it honours")
		assert.Equal(t, []throttle.Limit{throttle.Per(10, 10*time.Second)}, ps[0].Rules[0].Limits)

		// The 8 of t=0 leave the window; the one of 1.1 s still counts.
		time.Sleep(9 * time.Second)
		assert.Equal(t, 4, allowed(t, l, "k", 10))

		require.NoError(t, operator.ClearLimits(ctx, st, "api", "bob"))
		time.Sleep(11 * time.Second)
		assert.Equal(t, 10, allowed(t, l, "k", 12), "the rule's own limit again")

		h, err := operator.LimitHistory(ctx, st, "api")
		require.NoError(t, err)
		require.Len(t, h, 2)
		assert.True(t, h[0].Cleared)
		assert.Equal(t, "bob", h[0].By)
		assert.Equal(t, []throttle.Limit{throttle.Per(5, 10*time.Second)}, h[0].From)
		assert.Equal(t, []throttle.Limit{throttle.Per(10, 10*time.Second)}, h[0].To)
		assert.Equal(t, "alice", h[1].By)
		assert.Equal(t, []throttle.Limit{throttle.Per(10, 10*time.Second)}, h[1].From)
		assert.Equal(t, []throttle.Limit{throttle.Per(5, 10*time.Second)}, h[1].To)
		assert.True(t, h[1].Until.IsZero())
	})
}

// TestOverrideExpires: an override set For a while ends by itself.
func TestOverrideExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := newMemory(t)
		l := overrideLimiter(t, st, throttle.PerSecond(10))
		assert.Equal(t, 1, allowed(t, l, "k", 1))
		require.NoError(t, operator.SetLimits(ctx, st, "api", operator.Override{Limits: []throttle.Limit{throttle.PerSecond(2)}, For: 5 * time.Second}))
		o, ok, err := operator.Limits(ctx, st, "api")
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, 5*time.Second, o.For)
		assert.NotEmpty(t, o.By, "the OS user and host")

		time.Sleep(2 * time.Second)
		assert.Equal(t, 2, allowed(t, l, "k", 10), "the poll, then one more")
		time.Sleep(2 * time.Second)
		assert.Equal(t, 2, allowed(t, l, "k", 10))
		time.Sleep(2 * time.Second) // expired: the request that polls, then 9 more
		assert.Equal(t, 10, allowed(t, l, "k", 12))
		_, ok, err = operator.Limits(ctx, st, "api")
		require.NoError(t, err)
		assert.False(t, ok)
	})
}

// TestOverrideOnlyTightens: SetLimits refuses a raise, a wrong number of
// limits and an unknown rule; a process ignores a record that would raise
// its limit, written past SetLimits, and keeps its own.
func TestOverrideOnlyTightens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := newMemory(t)
		l := overrideLimiter(t, st, throttle.PerSecond(10), throttle.PerHour(1000))
		assert.Equal(t, 1, allowed(t, l, "k", 1))
		for name, ls := range map[string][]throttle.Limit{
			"a larger N":       {throttle.PerSecond(20), throttle.PerHour(1000)},
			"a shorter window": {throttle.Per(10, 500*time.Millisecond), throttle.PerHour(1000)},
			"paced":            {throttle.Paced(10, time.Second, 0), throttle.PerHour(1000)},
			"one limit":        {throttle.PerSecond(5)},
		} {
			err := operator.SetLimits(ctx, st, "api", operator.Override{Limits: ls})
			require.ErrorIs(t, err, operator.ErrRaise, name)
			if name == "one limit" {
				assert.ErrorContains(t, err, "the rule has 2 limits (10/1s 1000/1h)")
			}
		}
		require.ErrorIs(t, operator.SetLimits(ctx, st, "nope", operator.Override{Limits: []throttle.Limit{throttle.PerSecond(1)}}), operator.ErrUnknownRule)
		h, err := operator.LimitHistory(ctx, st, "api")
		require.NoError(t, err)
		assert.Empty(t, h, "nothing refused is recorded")

		raw := []byte(`{"limits":[{"N":20,"Per":1000000000},{"N":1000,"Per":3600000000000}],"at_ms":1,"by":"mallory"}`)
		require.NoError(t, st.(contract.Overrides).SetOverride(ctx, "api", raw, 0, raw))
		time.Sleep(2 * time.Second)
		assert.Equal(t, 10, allowed(t, l, "k", 20), "the rule's own 10/1s")
	})
}

// callCounter counts the round trips of a go-redis client: one per
// command sent alone, one per pipeline but a new connection's handshake.
type callCounter struct{ n *atomic.Int64 }

func (c callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() != "hello" && cmds[0].Name() != "client" {
			c.n.Add(1) // not a new connection's handshake
		}
		return next(ctx, cmds)
	}
}

// TestOverridePollRidesWithTheReservations: on Redis, a process reads the
// operator's overrides once a second in the round trip of one of its
// reservations, not in a call of its own: over 1.5 s of requests it makes
// one call per request, and one more to publish the override it then
// honours.
func TestOverridePollRidesWithTheReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Shared(t)
	prefix := "ride-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	client := srv.Client(t)
	calls := &atomic.Int64{}
	client.AddHook(callCounter{calls})
	st, err := store.NewRedis(client, store.WithPrefix(prefix))
	require.NoError(t, err)
	admin, err := store.NewRedis(srv.Client(t), store.WithPrefix(prefix))
	require.NoError(t, err)
	l, err := throttle.NewLimiter(st, throttle.Rule{Name: "api", Limits: []throttle.Limit{throttle.PerSecond(1000)}, Margin: throttle.NoMargin, NoDefaultPace: true, FailFast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	ok, err := l.Allow(ctx, "k", 1) // publishes the rule, polls the overrides
	require.NoError(t, err)
	require.True(t, ok)
	require.Eventually(t, func() bool {
		ps, err := operator.Published(ctx, admin)
		return err == nil && len(ps) == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, operator.SetLimits(ctx, admin, "api", operator.Override{Limits: []throttle.Limit{throttle.PerSecond(500)}, By: "alice"}))

	calls.Store(0)
	sent := 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); sent++ {
		ok, err := l.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, ok)
		time.Sleep(10 * time.Millisecond)
	}
	require.Eventually(t, func() bool {
		ps, err := operator.Published(ctx, admin)
		return err == nil && len(ps) == 1 && len(ps[0].Rules[0].Override) == 1
	}, 5*time.Second, 10*time.Millisecond, "the process honours the override, and says so")
	assert.Equal(t, int64(sent+1), calls.Load(), "one call per request, and one to publish the override honoured")
}
