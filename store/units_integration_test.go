//go:build integration

package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestUnitMemory measures what a unit's log costs in Redis: a budget of
// 2,000,000 tokens a minute at 50 requests a second (3,000 requests in the
// window; 800 tokens each overfill it, so that the later ones wait for
// their slot), each request one weighted entry; beside it the request log of
// today (one entry per unit) for the requests. It prints MEMORY USAGE per
// request, and the Redis time of a reservation (INFO commandstats of
// EVALSHA) as the window fills. Run with -tags integration -run TestUnitMemory -v.
func TestUnitMemory(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	clock := newFakeClock()
	r, err := redisstore.NewRedis(c, redisstore.WithClientTime(clock.Now))
	require.NoError(t, err)
	for _, cost := range []int{0, 100, 600, 800} {
		key := fmt.Sprintf("mem-%d", cost)
		rq := req(1, time.Hour, lim(1_000_000, time.Minute))
		if cost > 0 { // 0: the request log alone, for comparison
			rq.Also = []contract.Part{{Unit: "tokens", Cost: cost, Limits: []contract.Limit{lim(2_000_000, time.Minute)}}}
		}
		require.NoError(t, c.ConfigResetStat(ctx).Err())
		for i := range 3000 {
			res, err := r.Reserve(ctx, key, rq)
			require.NoError(t, err)
			require.True(t, res.Allowed, "request %d", i)
			clock.Advance(20 * time.Millisecond)
		}
		stats, err := c.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		own, err := c.MemoryUsage(ctx, "throttle:{"+key+"}").Result()
		require.NoError(t, err)
		if cost == 0 {
			t.Logf("the request log alone: %d bytes for 3000 entries (%.1f B per entry)", own, float64(own)/3000)
		} else {
			unit, err := c.MemoryUsage(ctx, "throttle:{"+key+"}:u:tokens").Result()
			require.NoError(t, err)
			n, err := c.LLen(ctx, "throttle:{"+key+"}:u:tokens").Result()
			require.NoError(t, err)
			t.Logf("cost %d tokens: unit log %d bytes for %d requests (%.1f B per request), request log %d bytes",
				cost, unit, n/2, float64(unit)/float64(n/2), own)
		}
		t.Logf("%s", grep(stats, "cmdstat_evalsha"))
	}
}

func grep(s, prefix string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
