//go:build integration

package examples_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// TestFleetLostState runs the payments fleet (4 processes x 8 workers at
// 100/s against an exact sliding-log upstream) and, halfway, loses the
// key's state as an operator or a fault would: a DEL of its log, a SET of
// garbage over it (which the store repairs), and the CLI's reset (the
// store's Delete of every Redis key of the rate key). The upstream still
// counts what was sent before; the store takes the lost log as full for a
// window, so no run may meet a 429. Before, each met one in 2 of 3 runs.
//
//	FLEET_LOST_REPS=10 go test -tags integration -run TestFleetLostState -v ./examples
func TestFleetLostState(t *testing.T) {
	if testing.Short() {
		t.Skip("the lost-state fleet runs for about 15s a repetition")
	}
	_, d, _ := fleetEnv(t)
	reps := 1
	if v := os.Getenv("FLEET_LOST_REPS"); v != "" {
		var err error
		reps, err = strconv.Atoi(v)
		require.NoError(t, err, "FLEET_LOST_REPS")
	}
	const rate, procs, workers = 100, 4, 8
	dir := buildExamples(t)
	srv, rdb := startRedis(t)
	st, err := store.NewRedis(rdb)
	require.NoError(t, err)
	admin := st.(contract.Admin)
	const key = "payments:pg1" // the example's rule and key
	logKey := admin.Keys(key)[0]
	ctx := context.Background()

	var table strings.Builder
	fmt.Fprintf(&table, "\n%d/s, %d processes x %d workers, %s per run, the state lost halfway\n", rate, procs, workers, d)
	for _, tc := range []struct {
		name string
		lose func() error
	}{
		{"DEL", func() error { return rdb.Del(ctx, logKey).Err() }},
		{"SET garbage", func() error { return rdb.Set(ctx, logKey, "garbage", 0).Err() }},
		{"reset", func() error { _, err := admin.Delete(ctx, key); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs429 := 0
			for range reps {
				f := paymentsFleet(dir, rate, d, procs, 0, "-redis", srv.Addr, "-workers", strconv.Itoa(workers))
				var lost error
				var live int64
				f.during = func() {
					live = rdb.Exists(ctx, logKey).Val()
					lost = tc.lose()
				}
				res := runFleet(t, rdb, f)
				require.NoError(t, lost)
				require.EqualValues(t, 1, live, "the log was live when it was lost")
				logSummaries(t, res)
				s := res.stats.Total
				if s.Rejected > 0 {
					runs429++
				}
				assert.Zero(t, s.Rejected, "429s at %v", s.RejectedAt)
				fmt.Fprintf(&table, "%-12s accepted=%d 429=%d\n", tc.name, s.Accepted, s.Rejected)
			}
			fmt.Fprintf(&table, "%-12s runs with a 429: %d of %d\n", tc.name, runs429, reps)
		})
	}
	t.Log(table.String())
}
