package store_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// Lost state (write.lua's seen mark): a log that disappears while the key
// is live is taken as full for one window, since the upstream still counts
// what it held; a log that expired, or that a Cancel emptied, is not.

// lostEnd is when a log lost at now, whose newest entry was recorded at
// rec, lets a request through again under a window of w: one window after
// the end of the half window rec was in (the seen mark), or after now.
func lostEnd(rec, now int64, w time.Duration) int64 {
	period := max(w.Microseconds()/2, 1000)
	return max(now, rec-rec%period+period) + w.Microseconds()
}

// TestRedisLostLogWaitsAWindow: a live log deleted (an operator's DEL, the
// CLI's reset through Delete) or overwritten by a value of another type
// (repaired away) makes the next reservation wait a window from the seen
// mark, as if the limit's N had been sent then, and the reservations after
// it too; a paced limit lost with it starts with its burst spent.
func TestRedisLostLogWaitsAWindow(t *testing.T) {
	c := realRedis(t)
	clock := newFakeClock()
	s, err := redisstore.NewRedis(c, redisstore.WithClientTime(clock.Now))
	require.NoError(t, err)
	const w, maxWait = time.Second, 2 * time.Minute
	for name, lose := range map[string]func(key string){
		"DEL":         func(key string) { require.NoError(t, c.Del(ctx, s.RedisKey(key)).Err()) },
		"SET garbage": func(key string) { require.NoError(t, c.Set(ctx, s.RedisKey(key), "garbage", 0).Err()) },
		"Delete (reset)": func(key string) {
			n, err := s.Delete(ctx, key)
			require.NoError(t, err)
			require.Positive(t, n)
		},
	} {
		for shape, r := range map[string]contract.Request{
			"a window":        req(1, maxWait, lim(10, w)),
			"two windows":     req(1, maxWait, lim(10, w), lim(100, time.Minute)),
			"a window, paced": {Limits: []contract.Limit{lim(10, w), paced(10, w, 2)}, Cost: 1, MaxWait: maxWait},
		} {
			t.Run(name+"/"+shape, func(t *testing.T) {
				key := uniqueKey(t)
				first := reserve(t, s, key, r)
				require.True(t, first.Allowed)
				clock.Advance(100 * time.Millisecond)
				second := reserve(t, s, key, r)
				require.True(t, second.Allowed)
				lose(key)
				clock.Advance(10 * time.Millisecond)
				now := clock.Now().UnixMicro()

				res := reserve(t, s, key, r)
				require.True(t, res.Allowed)
				longest := w
				if len(r.Limits) == 2 && !r.Limits[1].Paced {
					longest = time.Minute
				}
				assert.Equal(t, lostEnd(second.Entry, now, longest)-now, res.Delay.Microseconds(),
					"waits a window from the seen mark")
				assert.GreaterOrEqual(t, res.Delay, longest-110*time.Millisecond, "at least what the lost log could still hold")
				assert.Equal(t, contract.CauseLimit, res.Cause)
				next := reserve(t, s, key, r)
				require.True(t, next.Allowed)
				assert.GreaterOrEqual(t, next.Slot, res.Slot, "the next one waits too")
			})
		}
	}
}

// TestRedisLostLogRefusedStaysFull: a request refused after the loss was
// seen (its max wait is shorter than the window) still leaves the log full,
// with a TTL, so that every later request waits too.
func TestRedisLostLogRefusedStaysFull(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	key := uniqueKey(t)
	r := req(1, 0, lim(5, time.Minute))
	require.True(t, reserve(t, s, key, r).Allowed)
	require.NoError(t, c.Del(ctx, s.RedisKey(key)).Err())
	res := reserve(t, s, key, r)
	require.False(t, res.Allowed)
	assert.Greater(t, res.RetryAfter, 50*time.Second)
	assert.EqualValues(t, 5, c.LLen(ctx, s.RedisKey(key)).Val(), "the lost log taken as full")
	assert.Positive(t, c.PTTL(ctx, s.RedisKey(key)).Val(), "with a TTL")
	assert.False(t, reserve(t, s, key, r).Allowed, "and the next one waits too")
}

// TestRedisNotLost: a new key, a key whose log a Cancel emptied, and a key
// whose log expired are free at once: only a loss makes a key wait.
func TestRedisNotLost(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	for _, r := range []contract.Request{
		req(1, time.Minute, lim(2, time.Minute)),
		{Limits: []contract.Limit{lim(2, time.Minute), paced(2, time.Minute, 0)}, Cost: 1, MaxWait: time.Minute},
	} {
		key := uniqueKey(t)
		res := reserve(t, s, key, r)
		require.True(t, res.Allowed)
		assert.Zero(t, res.Delay, "a new key")
		require.NoError(t, s.Cancel(ctx, res))
		assert.Zero(t, c.Exists(ctx, s.RedisKey(key)).Val(), "the cancel emptied the log")
		res = reserve(t, s, key, r)
		require.True(t, res.Allowed)
		assert.Zero(t, res.Delay, "a log a Cancel emptied was not lost")
	}

	key := uniqueKey(t)
	r := req(1, 0, lim(1, 20*time.Millisecond))
	require.True(t, reserve(t, s, key, r).Allowed)
	require.Eventually(t, func() bool { return c.Exists(ctx, s.RedisKey(key)).Val() == 0 }, 5*time.Second, 5*time.Millisecond)
	res := reserve(t, s, key, r)
	require.True(t, res.Allowed, "a log that expired was not lost")
	assert.Zero(t, res.Delay)
}

// TestRedisSeenMarkCost: the seen mark costs a reservation no command in
// the common case: one SET beside each PEXPIRE (once per half window), one
// GET when the log is missing (a new key), nothing else (INFO
// commandstats over 1,000 reservations of one key spread over 5 windows,
// which start 9 half windows).
func TestRedisSeenMarkCost(t *testing.T) {
	srv, err := redistest.StartServer()
	if err != nil {
		t.Skipf("needs redis-server: %v", err)
	}
	t.Cleanup(srv.Close)
	c := srv.Client(t)
	clock := newFakeClock()
	s, err := redisstore.NewRedis(c, redisstore.WithClientTime(clock.Now))
	require.NoError(t, err)
	key := uniqueKey(t)
	r := req(1, 0, lim(1000, time.Second))
	reserve(t, s, key, r) // loads the script
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	for range 1000 {
		require.True(t, reserve(t, s, key, r).Allowed)
		clock.Advance(5 * time.Millisecond)
	}
	calls := callsByCommand(t, c)
	assert.Equal(t, 1000, calls["evalsha"])
	assert.Equal(t, 9, calls["pexpire"], "a TTL per half window")
	assert.Equal(t, calls["pexpire"], calls["set"], "the seen mark with each TTL")
	assert.Zero(t, calls["get"], "the mark is read only when the log is missing")
}

// callsByCommand returns the calls of each command since the last CONFIG
// RESETSTAT, from INFO commandstats.
func callsByCommand(t *testing.T, c *redis.Client) map[string]int {
	info, err := c.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	out := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(calls)
	}
	return out
}
