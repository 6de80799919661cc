package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// BenchmarkReserveMultiKey measures a reservation under one key, two keys
// (a token and its app) and four, through Redis.Reserve on a real
// redis-server: the round trip, the client's calls to Redis per Reserve
// (a go-redis hook: one EVALSHA, whatever the number of keys), the
// server's microseconds per script call, and the commands the script ran
// (INFO commandstats counts them, less the EVALSHA itself).
//
//	go test -run '^$' -bench ReserveMultiKey -benchtime 20000x ./store/
func BenchmarkReserveMultiKey(b *testing.B) {
	srv := redistest.Shared(b)
	if !srv.Real {
		b.Skip("needs a real redis-server")
	}
	rdb := srv.Client(b)
	var calls atomic.Int64
	rdb.AddHook(countCalls{&calls})
	st, err := redisstore.NewRedis(rdb)
	require.NoError(b, err)
	ctx := context.Background()
	never := []contract.Limit{{N: 1_000_000_000, Per: time.Second}} // every call appends one entry
	for _, keys := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("%d keys", keys), func(b *testing.B) {
			base := fmt.Sprintf("bench-multikey-%d-%d", keys, time.Now().UnixNano())
			r := contract.Request{Cost: 1, Limits: never}
			for i := 1; i < keys; i++ {
				r.Also = append(r.Also, contract.Part{Key: fmt.Sprintf("{%s}also%d", base, i), Limits: never})
			}
			key := "{" + base + "}own"
			_, err := st.Reserve(ctx, key, r) // loads the script
			require.NoError(b, err)
			require.NoError(b, rdb.ConfigResetStat(ctx).Err())
			calls.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				res, err := st.Reserve(ctx, key, r)
				if err != nil || !res.Allowed {
					b.Fatal(err, res)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(calls.Load())/float64(b.N), "redis-calls/op")
			info, err := rdb.Info(ctx, "commandstats").Result()
			require.NoError(b, err)
			b.ReportMetric(usecPerCall(b, info, "evalsha"), "server-µs/call")
			// Less CONFIG RESETSTAT, and each call's EVALSHA.
			b.ReportMetric(float64(commandCalls(b, info)-1-int64(b.N))/float64(b.N), "script-cmds/op")
		})
	}
}

// countCalls counts the commands a client sends, a pipeline's each.
type countCalls struct{ n *atomic.Int64 }

func (countCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
