//go:build integration

package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// TestClusterFailover sends requests through a Transport on a Redis Cluster
// while the master holding the rate key's log is killed. Its replica takes
// over; meanwhile requests fail with the store's error (failing closed, the default), each
// within its context's deadline; afterwards they flow again, without a panic,
// a hang or a goroutine left behind.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and fails a master over")
	}
	c := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() {
		_ = cc.Close()
		// go-redis probes a node it could not dial on a goroutine that
		// sleeps a second between probes and ends, once its pool is
		// closed, at the next one: wait for it, so that goleak does not
		// take it for a leak.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			buf := make([]byte, 1<<20)
			if !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*ConnPool).tryDial") {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	st, err := store.NewRedis(cc)
	require.NoError(t, err)

	var received atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
	}))
	t.Cleanup(up.Close)

	var decMu sync.Mutex
	outcomes := map[throttle.Outcome]int{}
	tr, err := throttle.New(up.Client().Transport, st,
		throttle.WithRule(throttle.Rule{
			Name: "fo", Host: "127.0.0.1", Key: throttle.Fixed("gw"),
			Limits: []throttle.Limit{throttle.PerSecond(400)},
		}),
		throttle.WithOnDecision(func(d throttle.Decision) {
			decMu.Lock()
			outcomes[d.Outcome]++
			decMu.Unlock()
		}))
	require.NoError(t, err)
	client := &http.Client{Transport: tr}

	ctx := context.Background()
	rk := store.DefaultPrefix + "{fo:gw}" // the log's key: prefix + "{" + key + "}"
	master, err := c.MasterOf(ctx, rk)
	require.NoError(t, err)
	replica, err := c.ReplicaOf(ctx, master)
	require.NoError(t, err)

	type event struct {
		at      time.Time
		took    time.Duration
		err     error
		workerN int
	}
	const timeout = 500 * time.Millisecond
	var (
		evMu   sync.Mutex
		events []event
		stop   atomic.Bool
		wg     sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				rctx, cancel := context.WithTimeout(ctx, timeout)
				req, _ := http.NewRequestWithContext(rctx, http.MethodGet, up.URL+"/x", nil)
				start := time.Now()
				resp, err := client.Do(req)
				took := time.Since(start)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				cancel()
				evMu.Lock()
				events = append(events, event{start, took, err, w})
				evMu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}

	time.Sleep(time.Second)
	killedAt := time.Now()
	require.NoError(t, c.Kill(master))
	// Run until requests have flowed again for a while, or give up.
	var recovered time.Time
	for time.Since(killedAt) < 30*time.Second {
		time.Sleep(50 * time.Millisecond)
		evMu.Lock()
		for _, e := range events {
			if e.err == nil && e.at.After(killedAt) && recovered.IsZero() {
				recovered = e.at
			}
		}
		evMu.Unlock()
		if !recovered.IsZero() && time.Since(recovered) > time.Second {
			break
		}
	}
	stop.Store(true)
	wg.Wait()

	now, err := c.MasterOf(ctx, rk)
	require.NoError(t, err)
	assert.Equal(t, replica, now, "the replica took over the key's slot")

	var before, gapErrs, after, ok, storeErrs int
	var worst time.Duration
	kinds := map[string]int{}
	for _, e := range events {
		worst = max(worst, e.took)
		switch {
		case e.err == nil:
			ok++
		case strings.Contains(e.err.Error(), "store: redis reserve"):
			storeErrs++
		case errors.Is(e.err, throttle.ErrLimited), errors.Is(e.err, context.DeadlineExceeded):
		default:
			t.Errorf("unexpected error: %v", e.err)
		}
		switch {
		case e.at.Before(killedAt):
			if e.err == nil {
				before++
			}
		case recovered.IsZero() || e.at.Before(recovered):
			if e.err != nil {
				gapErrs++
				kinds[errKind(e.err)]++
			}
		default:
			if e.err == nil {
				after++
			}
		}
	}
	require.False(t, recovered.IsZero(), "requests never flowed again after the failover (errors: %v)", kinds)
	t.Logf("killed master %s; replica %s took over; first request sent again %s after the kill",
		master, replica, recovered.Sub(killedAt).Round(time.Millisecond))
	t.Logf("sent before=%d after=%d; failed in the gap=%d %v; slowest request %s (context timeout %s); outcomes %v",
		before, after, gapErrs, kinds, worst.Round(time.Millisecond), timeout, outcomes)
	assert.Positive(t, before)
	assert.Positive(t, after)
	assert.Positive(t, kinds["store: connection refused"], "the gap produced no store errors: the test did not see the failover")
	assert.LessOrEqual(t, int64(ok), received.Load(), "every request that returned a response reached the upstream")
	assert.Less(t, worst, timeout+time.Second, "a request outlived its context")
	decMu.Lock()
	assert.Zero(t, outcomes[throttle.FailedOpen])
	assert.Equal(t, storeErrs, outcomes[throttle.Failed], "each store error was a Failed decision")
	// A request decided Sent may still meet its deadline before the upstream
	// reads it; none reaches the upstream without being decided Sent.
	assert.LessOrEqual(t, received.Load(), int64(outcomes[throttle.Sent]), "the upstream received only requests decided Sent")
	decMu.Unlock()

	// The new master had never run the scripts: Redis 7 does not replicate
	// the script cache, so EVALSHA met NOSCRIPT there and EVAL loaded it.
	nc := redis.NewClient(&redis.Options{Addr: replica})
	defer nc.Close()
	stats, err := nc.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	assert.Contains(t, stats, "cmdstat_eval:", "the new master ran EVAL after the failover")
}

// errKind names an error by its cause, for the log.
func errKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case strings.Contains(err.Error(), "store: redis reserve"):
		msg := err.Error()
		i := strings.LastIndex(msg, ": ")
		kinds := []string{"connection refused", "CLUSTERDOWN", "i/o timeout", "EOF", "MOVED", "reset"}
		sort.Strings(kinds)
		for _, k := range kinds {
			if strings.Contains(msg, k) {
				return "store: " + k
			}
		}
		return "store: " + msg[i+2:]
	default:
		return err.Error()
	}
}
