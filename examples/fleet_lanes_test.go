//go:build integration

package examples_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/plot"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

// TestFleetLanes measures priority lanes in a fleet: 3 processes of 8
// backfill workers each keep a limit of 100 per second saturated, and a
// fourth process sends an interactive request every 200ms, against a strict
// sliding-window upstream enforcing the same limit. Each process is a
// Transport of its own, with its own engine and Redis client, on one real
// redis-server (subtest redis), then on a Redis Cluster of three masters
// (subtest cluster). The same traffic runs without lanes, then with them
// (the interactive requests in lane 1, the backfill in lane 0), and the
// test logs, side by side: the interactive waits (p50, p99, max), their
// allowance, the backfill's share of what the interactive requests leave
// (in the steady part of the run: from its second second to its last half
// second), the 429s and the script calls per request. Judged: no 429, no
// failed request and, on the Cluster, every key of the rule in one slot.
//
//	FLEET_LANES_REPS=3 FLEET_LANES_DURATION=10s go test -tags integration -run TestFleetLanes -v ./examples
//
// FLEET_LANES_DURATION sets a run's length (default 5s, to keep the
// default run short); FLEET_LANES_SVG names a file to draw each request's
// wait in, over time, from the runs on one redis-server
// (docs/lanes-waits.svg).
func TestFleetLanes(t *testing.T) {
	if testing.Short() {
		t.Skip("the lanes fleet runs for about 25s")
	}
	d, reps := fleetRunEnv(t, "LANES")
	pic := lanesPicture(d)
	forEachFleetStore(t, func(t *testing.T, st fleetStore) { fleetLanesOn(t, st, d, reps, pic) })
	pic.write(t)
}

// fleetLanesOn runs the lanes fleet on st reps times for d, without lanes
// and with them, and logs the table; pic keeps the runs on one redis-server.
func fleetLanesOn(t *testing.T, st fleetStore, d time.Duration, reps int, pic *waitsPicture) {
	var table strings.Builder
	fmt.Fprintf(&table, "\n%s: 100/s, 3 processes x 8 backfill workers + 1 interactive request every 200ms, %s per run\n", st.desc, d)
	fmt.Fprintf(&table, "%-14s %-22s %-10s %-10s %-9s %-14s %-6s %-10s %s\n", "", "interactive wait", "max", "allowance", "sent", "backfill share", "429s", "calls/req", "bumps")
	fmt.Fprintf(&table, "%-14s %-22s\n", "", "p50 / p99")
	for _, tc := range []struct {
		name  string
		lanes int
	}{
		{"without lanes", 0},
		{"with lanes", 2},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			for range reps {
				st.flush(t)
				res := runLanesFleet(t, st, d, tc.lanes)
				if st.cluster == nil {
					pic.add(tc.name, res.asked)
				}
				w := res.waits
				fmt.Fprintf(&table, "%-14s %-22s %-10s %-10s %-9d %-14s %-6d %-10.3f %d\n", tc.name,
					fmt.Sprintf("%s / %s", quantile(w, 0.5).Round(time.Millisecond), quantile(w, 0.99).Round(time.Millisecond)),
					quantile(w, 1).Round(time.Millisecond), res.allowance.Round(time.Millisecond), len(w),
					fmt.Sprintf("%.1f%%", 100*res.share), res.rejected, res.perReq, res.bumped)
				t.Logf("interactive: %d sent, %d took a backfill slot, median allowance %s; backfill: %d sent, bumped %d times; "+
					"steady part: %d interactive and %d backfill arrivals in %s (%.1f%% of the limit used); 429s %d; script calls %d (%.3f per request)",
					len(w), res.took, res.allowance, res.backfill, res.bumped, res.steadyInteractive, res.steadyBackfill,
					res.steady, 100*res.used, res.rejected, res.calls, res.perReq)
				require.Zero(t, res.rejected, "429s")
				require.Zero(t, res.failed, "requests that failed")
				st.requireOneSlot(t)
			}
		})
	}
	t.Log(table.String())
	pic.write(t)
}

// lanesResult is what one run of the lanes fleet measured.
type lanesResult struct {
	waits     []time.Duration // the interactive requests' waits, sorted
	allowance time.Duration   // the interactive requests' median allowance
	took      int             // interactive requests that took a backfill slot
	backfill  int             // backfill requests sent
	bumped    int             // times a backfill request's slot was taken
	failed    int             // requests that failed or were refused before the end
	rejected  int             // 429s
	calls     int64
	perReq    float64
	asked     map[string][]plot.Point // every request's wait by when it asked, by lane, for the picture

	steady                            time.Duration // the steady part of the run
	steadyInteractive, steadyBackfill int           // upstream arrivals in it
	share                             float64       // backfill over what the interactive lane left of the limit
	used                              float64       // all arrivals over the limit
}

// runLanesFleet runs the lanes fleet once for d on st, with lanes lanes (0:
// none), and measures it.
func runLanesFleet(t *testing.T, st fleetStore, d time.Duration, lanes int) lanesResult {
	const (
		rate, procs, workers = 100, 3, 8
		every                = 200 * time.Millisecond
	)
	up, err := throttletest.NewUpstream(throttletest.Config{N: rate, Window: time.Second})
	require.NoError(t, err)
	var mu sync.Mutex
	var interactiveAt []time.Time
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Interactive") != "" {
			mu.Lock()
			interactiveAt = append(interactiveAt, time.Now())
			mu.Unlock()
		}
		up.ServeHTTP(w, r)
	}))
	defer gateway.Close()
	u, err := url.Parse(gateway.URL)
	require.NoError(t, err)
	rule := throttle.Rule{
		Name:   "lanes",
		Host:   u.Host,
		Limits: []throttle.Limit{throttle.PerSecond(rate)},
		Key:    throttle.Fixed("gateway"),
	}
	if lanes > 0 {
		rule.Lanes = lanes
		rule.Lane = func(r *http.Request) int {
			if r.Header.Get("X-Interactive") != "" {
				return 1
			}
			return 0
		}
	}
	calls0 := scriptCalls(t, st.client(t))

	var backfillD, interactiveD []throttle.Decision // under mu
	var asked waitLog
	process := func(conns int, into *[]throttle.Decision, series string) *http.Client {
		rs, err := store.NewRedis(st.client(t)) // a Redis client per process
		require.NoError(t, err)
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = conns
		t.Cleanup(base.CloseIdleConnections)
		tr, err := throttle.New(base, rs, throttle.WithRule(rule), throttle.WithOnDecision(func(d throttle.Decision) {
			mu.Lock()
			*into = append(*into, d)
			mu.Unlock()
			asked.add(series, d)
		}))
		require.NoError(t, err)
		return &http.Client{Transport: tr}
	}
	var failed, rejected atomic.Int64
	// do sends one request and reports whether the run goes on for its
	// worker: not after the end, nor once the next slot lies beyond it.
	do := func(ctx context.Context, c *http.Client, interactive bool) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, gateway.URL+"/v1/items", nil)
		if err != nil {
			t.Error(err)
			return false
		}
		if interactive {
			req.Header.Set("X-Interactive", "1")
		}
		resp, err := c.Do(req)
		var le *throttle.LimitError
		switch {
		case err == nil:
			if resp.StatusCode == http.StatusTooManyRequests {
				rejected.Add(1)
			}
			_ = resp.Body.Close()
		case ctx.Err() != nil, errors.As(err, &le) && le.BeyondDeadline:
			return false // the end of the run: in flight, or a slot beyond it
		default:
			failed.Add(1)
			t.Logf("%v", err)
		}
		return ctx.Err() == nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range procs {
		c := process(workers, &backfillD, "backfill")
		for range workers {
			wg.Go(func() {
				for do(ctx, c, false) {
				}
			})
		}
	}
	ic := process(4, &interactiveD, "interactive")
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				wg.Go(func() { do(ctx, ic, true) })
			}
		}
	})
	wg.Wait()

	res := lanesResult{failed: int(failed.Load()), rejected: int(rejected.Load()), asked: asked.since(start)}
	mu.Lock()
	defer mu.Unlock()
	var allowances []time.Duration
	for _, d := range interactiveD {
		if d.Outcome == throttle.Sent {
			res.waits = append(res.waits, d.Delay)
			allowances = append(allowances, d.Allowance)
			if d.Took {
				res.took++
			}
		}
	}
	for _, d := range backfillD {
		if d.Outcome == throttle.Sent {
			res.backfill++
		}
		res.bumped += d.Bumped
	}
	slices.Sort(res.waits)
	slices.Sort(allowances)
	res.allowance = quantile(allowances, 0.5)

	// The steady part: from the run's second second to half a second
	// before its end.
	from, to := start.Add(time.Second), start.Add(d-500*time.Millisecond)
	res.steady = to.Sub(from)
	in := func(at time.Time) bool { return !at.Before(from) && at.Before(to) }
	all := 0
	for _, at := range up.Stats().Total.Arrivals {
		if in(at) {
			all++
		}
	}
	for _, at := range interactiveAt {
		if in(at) {
			res.steadyInteractive++
		}
	}
	res.steadyBackfill = all - res.steadyInteractive
	limit := float64(rate) * res.steady.Seconds()
	res.share = float64(res.steadyBackfill) / (limit - float64(res.steadyInteractive))
	res.used = float64(all) / limit
	res.calls = scriptCalls(t, st.client(t)) - calls0
	res.perReq = float64(res.calls) / float64(max(1, len(res.waits)+res.backfill))
	return res
}

// fleetStore is the Redis the processes of an in-process fleet share: one
// redis-server, or a Redis Cluster of three masters.
type fleetStore struct {
	desc    string
	cluster *redistest.Cluster // nil for one redis-server
	addr    string             // the redis-server's, for one
}

// fleetRunEnv reads FLEET_<name>_DURATION, a run's length (default 5s, at
// least 3s), and FLEET_<name>_REPS, the runs per scenario (default 1).
func fleetRunEnv(t *testing.T, name string) (d time.Duration, reps int) {
	t.Helper()
	d, reps = 5*time.Second, 1
	if v := os.Getenv("FLEET_" + name + "_DURATION"); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		require.NoError(t, err, "FLEET_%s_DURATION", name)
		require.GreaterOrEqual(t, d, 3*time.Second, "FLEET_%s_DURATION", name)
	}
	if v := os.Getenv("FLEET_" + name + "_REPS"); v != "" {
		var err error
		reps, err = strconv.Atoi(v)
		require.NoError(t, err, "FLEET_%s_REPS", name)
	}
	return d, reps
}

// forEachFleetStore runs fn in a subtest on one redis-server ("redis"),
// then in another on a Redis Cluster of three masters ("cluster").
func forEachFleetStore(t *testing.T, fn func(t *testing.T, st fleetStore)) {
	t.Run("redis", func(t *testing.T) {
		srv, _ := startRedis(t)
		fn(t, fleetStore{desc: "one redis-server", addr: srv.Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		fn(t, fleetStore{desc: "Redis Cluster of 3 masters", cluster: redistest.StartCluster(t)})
	})
}

// client returns a new client of st, closed at the end of the test: a
// *redis.ClusterClient on a Cluster.
func (st fleetStore) client(t *testing.T) redis.UniversalClient {
	if st.cluster != nil {
		return st.cluster.Client(t)
	}
	c := redis.NewClient(&redis.Options{Addr: st.addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// flush deletes every key of st, on every master of a Cluster.
func (st fleetStore) flush(t *testing.T) {
	t.Helper()
	require.NoError(t, forEachMaster(context.Background(), st.client(t), func(ctx context.Context, c *redis.Client) error {
		return c.FlushAll(ctx).Err()
	}))
}

// requireOneSlot fails the test unless every key a run left on a Cluster,
// but the rules the processes publish (throttle:rules and its records), lies
// in one hash slot: a rule's keys (its log and its lanes' or tenants' index)
// must share its key's hash tag for a reservation to be one script call. It
// does nothing on one redis-server.
func (st fleetStore) requireOneSlot(t *testing.T) {
	t.Helper()
	if st.cluster == nil {
		return
	}
	var mu sync.Mutex
	slots := map[int][]string{}
	require.NoError(t, forEachMaster(context.Background(), st.client(t), func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, "*").Result()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			if k != "throttle:rules" && !strings.HasPrefix(k, "throttle:rules:") {
				slots[redistest.Slot(k)] = append(slots[redistest.Slot(k)], k)
			}
		}
		return err
	}))
	require.Len(t, slots, 1, "the rule's keys by hash slot: %v", slots)
}

// quantile returns the q-quantile of sorted (nearest rank), 0 if empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
