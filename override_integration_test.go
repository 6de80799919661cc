//go:build integration

package throttle_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

// applied is a slog.Handler that notes when each process applied or
// cleared an override.
type applied struct {
	mu    *sync.Mutex
	times *[]time.Time
}

func (h applied) Enabled(context.Context, slog.Level) bool { return true }
func (h applied) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "throttle: override") {
		h.mu.Lock()
		*h.times = append(*h.times, time.Now())
		h.mu.Unlock()
	}
	return nil
}
func (h applied) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h applied) WithGroup(string) slog.Handler      { return h }

// TestOverrideFleet: three Transports (as three processes, each its own
// Redis client) × 4 workers send as fast as a 100/s rule lets them to an
// exact sliding-log upstream of 100/s. throttle set's call lowers the rule
// to 50/s for a while, then clears it. It measures the time from the set
// to the last process applying it, and to the upstream's arrivals in the
// last second first falling to 50; the rate before, under and after the
// override; and asserts 0 × 429 throughout.
//
//	go test -tags integration -run TestOverrideFleet -v -count 3 .
func TestOverrideFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("about 14 s")
	}
	const (
		procs, workers = 3, 4
		warm, under    = 4 * time.Second, 6 * time.Second
		after          = 4 * time.Second
	)
	srv := redistest.Shared(t)
	if !srv.Real {
		t.Skip("needs a real redis-server")
	}
	up, err := throttletest.NewUpstream(throttletest.Config{N: 100, Window: time.Second})
	require.NoError(t, err)
	hs := httptest.NewServer(up)
	defer hs.Close()
	prefix := fmt.Sprintf("ovfleet%d:", time.Now().UnixNano())
	rule := throttle.Rule{Name: "api", Host: "127.0.0.1", Key: throttle.Fixed("api"), Limits: []throttle.Limit{throttle.PerSecond(100)}}

	var mu sync.Mutex
	var appliedAt []time.Time
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for range procs {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: workers + 2})
		t.Cleanup(func() { _ = rdb.Close() })
		rs, err := store.NewRedis(rdb, store.WithPrefix(prefix))
		require.NoError(t, err)
		base := http.DefaultTransport.(*http.Transport).Clone()
		t.Cleanup(base.CloseIdleConnections)
		tr, err := throttle.New(base, rs, throttle.WithRule(rule), throttle.WithLogger(slog.New(applied{&mu, &appliedAt})))
		require.NoError(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		c := &http.Client{Transport: tr}
		for range workers {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/v1", nil)
					resp, err := c.Do(req)
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
	ops := srv.Client(t)
	opStore, err := store.NewRedis(ops, store.WithPrefix(prefix))
	require.NoError(t, err)
	start := time.Now()
	time.Sleep(warm)
	set := time.Now()
	require.NoError(t, operator.SetLimits(context.Background(), opStore, "api", operator.Override{Limits: []throttle.Limit{throttle.PerSecond(50)}, By: "test"}))
	time.Sleep(under)
	cleared := time.Now()
	require.NoError(t, operator.ClearLimits(context.Background(), opStore, "api", "test"))
	time.Sleep(after)
	stop()
	wg.Wait()
	end := time.Now()

	s := up.Stats().Total
	assert.Zero(t, s.Rejected, "429s at %v", s.RejectedAt)
	arr := s.Arrivals
	count := func(from, to time.Time) int {
		i, _ := slices.BinarySearchFunc(arr, from, func(a, b time.Time) int { return a.Compare(b) })
		j, _ := slices.BinarySearchFunc(arr, to, func(a, b time.Time) int { return a.Compare(b) })
		return j - i
	}
	rate := func(from, to time.Time) float64 { return float64(count(from, to)) / to.Sub(from).Seconds() }
	// The first time after the set when the arrivals of the last second
	// are 50 or fewer: scanned in 10 ms steps.
	halved := time.Duration(-1)
	for at := set; at.Before(cleared); at = at.Add(10 * time.Millisecond) {
		if count(at.Add(-time.Second), at) <= 50 {
			halved = at.Sub(set)
			break
		}
	}
	restored := time.Duration(-1)
	for at := cleared; at.Before(end); at = at.Add(10 * time.Millisecond) {
		if count(at.Add(-time.Second), at) >= 95 {
			restored = at.Sub(cleared)
			break
		}
	}
	mu.Lock()
	var applySet, applyClear []time.Duration
	for _, at := range appliedAt {
		if at.Before(cleared) {
			applySet = append(applySet, at.Sub(set).Round(time.Millisecond))
		} else {
			applyClear = append(applyClear, at.Sub(cleared).Round(time.Millisecond))
		}
	}
	mu.Unlock()
	before := rate(start.Add(time.Second), set)
	during := rate(set.Add(3*time.Second), cleared)
	afterRate := rate(cleared.Add(2*time.Second), end)
	t.Logf("429s %d; rate before %.1f/s, under the override %.1f/s, after it %.1f/s", s.Rejected, before, during, afterRate)
	t.Logf("set: applied by each process after %v; the last second's arrivals <= 50 after %v", applySet, halved.Round(time.Millisecond))
	t.Logf("clear: applied after %v; the last second's arrivals >= 95 after %v", applyClear, restored.Round(time.Millisecond))

	require.Len(t, applySet, procs, "each process applies the override once")
	require.Len(t, applyClear, procs, "and its clearing")
	for _, d := range append(applySet, applyClear...) {
		assert.Less(t, d, 2*time.Second, "a process polls once a second, at a request")
	}
	assert.Greater(t, before, 85.0)
	assert.InDelta(t, 50, during, 5)
	assert.Greater(t, afterRate, 85.0)
	assert.GreaterOrEqual(t, halved, time.Duration(0), "the rate halved")
	assert.GreaterOrEqual(t, restored, time.Duration(0), "the rate came back")
}
