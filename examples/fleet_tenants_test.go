//go:build integration

package examples_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/plot"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

// TestFleetTenants measures fair shares between tenants in a fleet: five
// tenants of one quota of 100 per second, weights 1, 1, 1, 2 and 5. Three
// of them (weights 1, 2 and 5) are backlogged: 3 processes each run 3
// workers per backlogged tenant, so that each keeps 9 requests waiting at
// all times. The two others send lightly: a fourth process sends a request
// of each every 200ms. Each process is a Transport of its own, with its own
// engine and Redis client, on one real redis-server (subtest redis), then on
// a Redis Cluster of three masters (subtest cluster), against a strict
// sliding-window upstream enforcing the same limit. A second scenario runs
// one backlogged tenant alone (weight 1, every other tenant idle).
//
// Logged per run, in the steady part (from the second second to the last
// half second): Jain's fairness index of the backlogged tenants' sends over
// their weights, the light tenants' waits (p50, p99, max), the share of the
// limit used, the 429s and the script calls per request. Judged: no 429, no
// failed request and, on the Cluster, every key of the rule in one slot.
//
//	FLEET_TENANTS_REPS=3 FLEET_TENANTS_DURATION=10s go test -tags integration -run TestFleetTenants -v ./examples
//
// FLEET_TENANTS_DURATION sets a run's length (default 5s, to keep the
// default run short); FLEET_TENANTS_SVG names a file to draw each
// request's wait in, over time, from the runs on one redis-server
// (docs/tenants-waits.svg).
func TestFleetTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("the tenants fleet runs for about 25s")
	}
	d, reps := fleetRunEnv(t, "TENANTS")
	pic := tenantsPicture(d)
	forEachFleetStore(t, func(t *testing.T, st fleetStore) { fleetTenantsOn(t, st, d, reps, pic) })
	pic.write(t)
}

// fleetTenantsOn runs the tenants fleet on st reps times for d, with fair
// shares and with one tenant alone, and logs the table; pic keeps the runs
// on one redis-server.
func fleetTenantsOn(t *testing.T, st fleetStore, d time.Duration, reps int, pic *waitsPicture) {
	weights := map[string]int{"a": 1, "b": 1, "c": 1, "d": 2, "e": 5}

	var table strings.Builder
	fmt.Fprintf(&table, "\n%s: 100/s, weights a1 b1 c1 d2 e5; backlogged: 3 processes x 3 workers each; light: one request of each every 200ms; %s per run\n", st.desc, d)
	fmt.Fprintf(&table, "%-12s %-8s %-28s %-20s %-8s %-6s %-10s %s\n", "", "Jain", "sent/weight (backlogged)", "light wait p50/p99", "max", "used", "429s", "calls/req")
	for _, tc := range []struct {
		name              string
		backlogged, light []string
	}{
		{"fair shares", []string{"a", "d", "e"}, []string{"b", "c"}},
		{"one alone", []string{"a"}, nil},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			for range reps {
				st.flush(t)
				res := runTenantsFleet(t, st, d, weights, tc.backlogged, tc.light)
				if st.cluster == nil {
					pic.add(tc.name, res.asked)
				}
				var norm []string
				for _, n := range tc.backlogged {
					norm = append(norm, fmt.Sprintf("%s %.1f", n, float64(res.steady[n])/float64(weights[n])))
				}
				w := res.lightWaits
				fmt.Fprintf(&table, "%-12s %-8.4f %-28s %-20s %-8s %-6s %-10d %.2f\n", tc.name, res.jain, strings.Join(norm, ", "),
					fmt.Sprintf("%s / %s", quantile(w, 0.5).Round(time.Millisecond), quantile(w, 0.99).Round(time.Millisecond)),
					quantile(w, 1).Round(time.Millisecond), fmt.Sprintf("%.1f%%", 100*res.used), res.rejected, res.perReq)
				t.Logf("steady arrivals by tenant %v in %s (%.1f%% of the limit); light sends %d; bumps %d; 429s %d; script calls %d (%.2f per request)",
					res.steady, res.span, 100*res.used, len(w), res.bumped, res.rejected, res.calls, res.perReq)
				if f := res.firstWaits; len(f) > 0 {
					t.Logf("light requests asked together: the first sent of each pair waited p50 %s, p99 %s",
						quantile(f, 0.5).Round(time.Millisecond), quantile(f, 0.99).Round(time.Millisecond))
				}
				if len(res.slow) > 0 {
					t.Logf("light waits beyond 20ms: %s", strings.Join(res.slow, "; "))
				}
				require.Zero(t, res.rejected, "429s")
				require.Zero(t, res.failed, "requests that failed")
				st.requireOneSlot(t)
			}
		})
	}
	t.Log(table.String())
}

// tenantsResult is what one run of the tenants fleet measured.
type tenantsResult struct {
	steady     map[string]int  // upstream arrivals by tenant in the steady part
	span       time.Duration   // the steady part's length
	jain       float64         // Jain's index of the backlogged tenants' steady arrivals over their weights
	used       float64         // all steady arrivals over the limit
	lightWaits []time.Duration // the light tenants' waits, sorted
	firstWaits []time.Duration // of each pair of light requests asked together, the one sent first's wait, sorted
	slow       []string        // the light tenants' waits beyond two spacings, and why
	bumped     int
	failed     int
	rejected   int
	sent       int
	calls      int64
	perReq     float64
	asked      map[string][]plot.Point // every request's wait by when it asked, by tenant, for the picture
}

// runTenantsFleet runs the tenants fleet once for d on st and measures it.
func runTenantsFleet(t *testing.T, st fleetStore, d time.Duration, weights map[string]int, backlogged, light []string) tenantsResult {
	const (
		rate, procs, workers = 100, 3, 3
		every                = 200 * time.Millisecond
	)
	up, err := throttletest.NewUpstream(throttletest.Config{N: rate, Window: time.Second})
	require.NoError(t, err)
	var mu sync.Mutex
	arrivals := map[string][]time.Time{} // under mu
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		c := r.Header.Get("X-Customer")
		arrivals[c] = append(arrivals[c], time.Now())
		mu.Unlock()
		up.ServeHTTP(w, r)
	}))
	defer gateway.Close()
	u, err := url.Parse(gateway.URL)
	require.NoError(t, err)
	rule := throttle.Rule{
		Name:    "tenants",
		Host:    u.Host,
		Limits:  []throttle.Limit{throttle.PerSecond(rate)},
		Key:     throttle.Fixed("gateway"),
		Tenant:  func(r *http.Request) (string, error) { return r.Header.Get("X-Customer"), nil },
		Weights: weights,
	}
	calls0 := scriptCalls(t, st.client(t))

	var decisions []throttle.Decision // under mu
	var asked waitLog
	process := func(conns int) *http.Client {
		rs, err := store.NewRedis(st.client(t)) // a Redis client per process
		require.NoError(t, err)
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = conns
		t.Cleanup(base.CloseIdleConnections)
		tr, err := throttle.New(base, rs, throttle.WithRule(rule), throttle.WithOnDecision(func(d throttle.Decision) {
			mu.Lock()
			decisions = append(decisions, d)
			mu.Unlock()
			asked.add(d.Tenant, d)
		}))
		require.NoError(t, err)
		return &http.Client{Transport: tr}
	}
	var failed, rejected atomic.Int64
	do := func(ctx context.Context, c *http.Client, tenant string) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, gateway.URL+"/v1/items", nil)
		if err != nil {
			t.Error(err)
			return false
		}
		req.Header.Set("X-Customer", tenant)
		resp, err := c.Do(req)
		var le *throttle.LimitError
		switch {
		case err == nil:
			if resp.StatusCode == http.StatusTooManyRequests {
				rejected.Add(1)
			}
			_ = resp.Body.Close()
		case ctx.Err() != nil, errors.As(err, &le) && le.BeyondDeadline:
			return false // the end of the run
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
		c := process(workers * len(backlogged))
		for _, tenant := range backlogged {
			for range workers {
				wg.Go(func() {
					for do(ctx, c, tenant) {
					}
				})
			}
		}
	}
	if len(light) > 0 {
		lc := process(4)
		wg.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					for _, tenant := range light {
						wg.Go(func() { do(ctx, lc, tenant) })
					}
				}
			}
		})
	}
	wg.Wait()

	res := tenantsResult{failed: int(failed.Load()), rejected: int(rejected.Load()), steady: map[string]int{}, asked: asked.since(start)}
	mu.Lock()
	defer mu.Unlock()
	var pair []time.Duration // the light requests of one tick, in the order they were sent
	for _, d := range decisions {
		if d.Outcome != throttle.Sent {
			continue
		}
		res.sent++
		res.bumped += d.Bumped
		if slices.Contains(light, d.Tenant) {
			res.lightWaits = append(res.lightWaits, d.Delay)
			if pair = append(pair, d.Delay); len(pair) == len(light) {
				res.firstWaits = append(res.firstWaits, slices.Min(pair))
				pair = pair[:0]
			}
			if d.Delay > 20*time.Millisecond {
				res.slow = append(res.slow, fmt.Sprintf("%s (allowance %s, took %v, bumped %d)",
					d.Delay.Round(time.Millisecond), d.Allowance.Round(100*time.Microsecond), d.Took, d.Bumped))
			}
		}
	}
	slices.Sort(res.lightWaits)
	slices.Sort(res.firstWaits)
	from, to := start.Add(time.Second), start.Add(d-500*time.Millisecond)
	res.span = to.Sub(from)
	all := 0
	for c, ats := range arrivals {
		for _, at := range ats {
			if !at.Before(from) && at.Before(to) {
				res.steady[c]++
				all++
			}
		}
	}
	res.used = float64(all) / (float64(rate) * res.span.Seconds())
	var sum, sq float64
	for _, n := range backlogged {
		x := float64(res.steady[n]) / float64(weights[n])
		sum, sq = sum+x, sq+x*x
	}
	res.jain = sum * sum / (float64(len(backlogged)) * sq)
	res.calls = scriptCalls(t, st.client(t)) - calls0
	res.perReq = float64(res.calls) / float64(max(1, res.sent))
	return res
}
