package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
	"github.com/throttle-go/throttle/store/internal/script"
)

// BenchmarkReserveScriptFeedback measures what the feedback read costs
// the log script (internal/script/log.lua) on a real redis-server: the same reservation with the log
// alone (KEYS[1] only: the script skips the feedback), with an empty
// feedback key (the HMGET of every call), and with a learned limit and a
// budget in it (the HMGET, one LINDEX and an HINCRBY). It reports the
// server's own microseconds per call, from INFO commandstats, beside the
// round trip.
//
//	go test -run '^$' -bench ReserveScriptFeedback -benchtime 20000x ./store/
func BenchmarkReserveScriptFeedback(b *testing.B) {
	srv := redistest.Shared(b)
	if !srv.Real {
		b.Skip("needs a real redis-server")
	}
	rdb := srv.Client(b)
	script := redis.NewScript(script.Reserve("log"))
	st, err := redisstore.NewRedis(rdb)
	require.NoError(b, err)
	ctx := context.Background()
	// A limit that never binds: every call appends one entry.
	args := []any{1, 0, "", 0, 0, 1_000_000_000, int64(time.Second / time.Microsecond)}
	for _, c := range []struct {
		name  string
		keys  func(key string) []string
		setup func(key string)
	}{
		{"log only", func(k string) []string { return []string{st.RedisKey(k)} }, nil},
		{"empty feedback", func(k string) []string { return []string{st.RedisKey(k), st.FeedbackKey(k)} }, nil},
		{"learned limit and budget", func(k string) []string { return []string{st.RedisKey(k), st.FeedbackKey(k)} }, func(k string) {
			require.NoError(b, st.Learn(ctx, k, contract.Learned{
				Limit: contract.Limit{N: 1_000_000, Per: time.Second}, LimitTTL: time.Hour,
				Remaining: 1 << 40, Reset: time.Hour,
			}))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			key := fmt.Sprintf("bench-%s-%d", c.name, time.Now().UnixNano())
			if c.setup != nil {
				c.setup(key)
			}
			keys := c.keys(key)
			require.NoError(b, script.Run(ctx, rdb, keys, args...).Err()) // load it
			require.NoError(b, rdb.ConfigResetStat(ctx).Err())
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := script.Run(ctx, rdb, keys, args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			info, err := rdb.Info(ctx, "commandstats").Result()
			require.NoError(b, err)
			b.ReportMetric(usecPerCall(b, info, "evalsha"), "server-µs/call")
		})
	}
}

// usecPerCall reads usec_per_call of cmd from INFO commandstats.
func usecPerCall(b *testing.B, info, cmd string) float64 {
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(b, err)
				return f
			}
		}
	}
	b.Fatalf("no %s in INFO commandstats", cmd)
	return 0
}
