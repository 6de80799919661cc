package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// BenchmarkLease measures what a cap on requests in flight costs a request
// on a real redis-server, in time and in Redis calls (EVALSHA, EVAL and
// BLPOP, from INFO commandstats): a reservation without a cap; a capped
// one that finds a lease free, then gives it back; and capped ones from 16
// goroutines per core (32 on two) under a cap of 4, which wait in the queue for a lease handed
// over by a release (BLPOP), reserve with it, and give it back.
//
//	go test -run '^$' -bench Lease -benchtime 20000x ./store/
func BenchmarkLease(b *testing.B) {
	srv := redistest.Shared(b)
	if !srv.Real {
		b.Skip("needs a real redis-server")
	}
	rdb := srv.Client(b)
	st, err := redisstore.NewRedis(rdb)
	require.NoError(b, err)
	ctx := context.Background()
	limit := []contract.Limit{{N: 1_000_000_000, Per: time.Second}} // never binds
	one := func(b *testing.B, key string, rq contract.Request) {
		res, err := st.Reserve(ctx, key, rq)
		if err != nil {
			b.Fatal(err)
		}
		if res.Lease.Queued() {
			l, err := st.Await(ctx, res.Lease)
			if err != nil || !l.Held() {
				b.Fatalf("await: %v %v", l, err)
			}
			rq.Held = l
			if res, err = st.Reserve(ctx, key, rq); err != nil {
				b.Fatal(err)
			}
		}
		if !res.Allowed {
			b.Fatalf("refused: %+v", res)
		}
		if err := st.Release(ctx, res.Lease); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name     string
		inFlight int
		parallel int // goroutines per GOMAXPROCS; 0: one goroutine
	}{
		{"rate only", 0, 0},
		{"capped, free", 4, 0},
		{"capped, contended 16 on 4", 4, 16},
	} {
		b.Run(c.name, func(b *testing.B) {
			key := fmt.Sprintf("bench-lease-%d", time.Now().UnixNano())
			rq := contract.Request{Limits: limit, Cost: 1, MaxWait: time.Minute}
			if c.inFlight > 0 {
				rq.InFlight, rq.LeaseFor = c.inFlight, 10*time.Second
			}
			one(b, key, rq) // loads the scripts
			require.NoError(b, rdb.ConfigResetStat(ctx).Err())
			b.ReportAllocs()
			b.ResetTimer()
			if c.parallel == 0 {
				for range b.N {
					one(b, key, rq)
				}
			} else {
				b.SetParallelism(c.parallel)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						one(b, key, rq)
					}
				})
			}
			b.StopTimer()
			info, err := rdb.Info(ctx, "commandstats").Result()
			require.NoError(b, err)
			b.ReportMetric(float64(commandCalls(b, info, "evalsha", "eval", "blpop"))/float64(b.N), "redis-calls/op")
		})
	}
}

// commandCalls sums the calls of cmds (of every command when none) in INFO
// commandstats: the commands clients sent, not those scripts ran.
func commandCalls(b *testing.B, info string, cmds ...string) int64 {
	if len(cmds) == 0 {
		cmds = []string{""}
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		for _, cmd := range cmds {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd)
			if !ok {
				continue
			}
			if cmd == "" {
				_, rest, ok = strings.Cut(rest, ":") // every command
			} else {
				rest, ok = strings.CutPrefix(rest, ":")
			}
			if !ok {
				continue
			}
			for field := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(field, "calls="); ok {
					c, err := strconv.ParseInt(v, 10, 64)
					require.NoError(b, err)
					n += c
				}
			}
		}
	}
	return n
}
