//go:build integration

package throttle_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// TestRedisStallEndsWhenItAnswers pauses Redis for a second (CLIENT PAUSE)
// while four transports of eight workers each, as four processes would,
// send at 100 per second through it, and counts what they send in each
// second around the stall: in the second after Redis answers again, the
// fleet sends at the rate it sent before the stall. (Before, the stall's
// slow replies were learned as lateness, and the fleet sent a few requests
// a second for 8-10 s after it.)
//
// Figures: go test -tags integration -run TestRedisStallEndsWhenItAnswers -v -count 3 .
func TestRedisStallEndsWhenItAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses redis-server; several seconds")
	}
	const (
		procs, workers = 4, 8
		warm           = 3 * time.Second // before the stall
		stall          = time.Second
		after          = 3 * time.Second // after the stall's end
	)
	srv := redistest.Start(t)
	if !srv.Real {
		t.Skip("needs a real redis-server: CLIENT PAUSE")
	}
	var mu sync.Mutex
	var sent []time.Time
	var decisions []stamped
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		sent = append(sent, time.Now())
		mu.Unlock()
		return okResponse(r), nil
	})
	rule := throttle.Rule{Name: "stall", Host: "api.example.com", Key: throttle.Fixed("api"), Limits: []throttle.Limit{throttle.PerSecond(100)}}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for range procs {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: workers})
		t.Cleanup(func() { _ = rdb.Close() })
		rs, err := store.NewRedis(rdb)
		require.NoError(t, err)
		// A longer store timeout than the stall: the test is about what
		// the processes learn from it, not the failure policy.
		tr := newTransport(t, base, rs, throttle.WithRule(rule), throttle.WithStoreTimeout(3*time.Second),
			throttle.WithOnDecision(func(d throttle.Decision) {
				mu.Lock()
				decisions = append(decisions, stamped{time.Now(), d})
				mu.Unlock()
			}))
		for range workers {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/v1", nil)
					if !assert.NoError(t, err) {
						return
					}
					resp, err := tr.RoundTrip(req)
					if ctx.Err() != nil {
						return
					}
					if !assert.NoError(t, err) {
						return
					}
					resp.Body.Close()
				}
			})
		}
	}
	start := time.Now()
	time.Sleep(warm)
	pauser := srv.Client(t)
	paused := time.Now()
	require.NoError(t, pauser.Do(context.Background(), "CLIENT", "PAUSE", stall.Milliseconds()).Err())
	end := paused.Add(stall)
	time.Sleep(time.Until(end.Add(after)))
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(sent, func(a, b time.Time) int { return a.Compare(b) })
	count := func(from, to time.Time) int {
		i, _ := slices.BinarySearchFunc(sent, from, func(a, b time.Time) int { return a.Compare(b) })
		j, _ := slices.BinarySearchFunc(sent, to, func(a, b time.Time) int { return a.Compare(b) })
		return j - i
	}
	var perSecond []int // from the stall's start
	for s := paused; s.Before(end.Add(after - time.Second)); s = s.Add(time.Second) {
		perSecond = append(perSecond, count(s, s.Add(time.Second)))
	}
	before := count(start.Add(time.Second), paused) * int(time.Second) / int(paused.Sub(start.Add(time.Second)))
	t.Logf("sent per second: %d before the stall; from its start %v", before, perSecond)
	largest := make([]time.Duration, int((end.Add(after)).Sub(start)/time.Second)+1)
	retaken := make([]int, len(largest))
	for _, d := range decisions {
		i := min(int(d.at.Sub(start)/time.Second), len(largest)-1)
		largest[i] = max(largest[i], d.d.Allowance)
		retaken[i] += d.d.Retaken
	}
	t.Logf("per second from the start: largest allowance %v, retakes %v (the stall from %v)", largest, retaken, paused.Sub(start).Round(time.Millisecond))
	// A machine busy enough to wake the workers tens of milliseconds late
	// lowers the rate before and after alike (the allowance covers it):
	// the test compares the two, and the rate before must be meaningful.
	require.Greater(t, before, 50, "the fleet sends at most of its rate before the stall (is the machine too busy?)")
	// The second from 1s to 2s after the stall's end: a process's own
	// lateness, which a busy machine raises at any time, is learned for a
	// few seconds, so later seconds say less about the stall.
	n := count(end.Add(time.Second), end.Add(2*time.Second))
	assert.GreaterOrEqual(t, n, before*8/10, "the second after the stall's end: the rate of before")
	for i := 100; i < len(sent); i++ {
		require.GreaterOrEqual(t, sent[i].Sub(sent[i-100]), time.Second, "at most 100 sends in any second")
	}
}
