//go:build integration

package examples_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/internal/jitterproxy"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

// TestFleetJitter runs a fleet over a jittery network path to an exact
// sliding log: each request reaches the upstream 5 ± 3 ms after it was
// written, through a proxy that adds a 10 ms handshake (a round trip of the
// path) to the first request of each new connection and closes a
// connection after 100 requests, as nginx did by default
// (internal/jitterproxy), and the rule keeps the
// margin the docs advise, twice the jitter (10 ms). Three Transports in this
// process, each with its own Redis client and connections, × 4 workers, one
// real redis-server, each run cold (a fresh Redis, upstream and proxy). It
// logs per run the 429s, those after the first, and the share of the limit
// (accepted over what a fleet paced at the limit's rate with the default
// pace's burst can send from the first accepted arrival to the end of the
// run):
//
//	FLEET_JITTER_RUNS=10 go test -tags integration -run TestFleetJitter -v ./examples
//
// FLEET_RATE defaults to 100 here; FLEET_DURATION as for TestFleet. A run is
// judged on the guarantee after the first refusal: at most maxAfterFirst
// 429s to requests written after it was answered.
func TestFleetJitter(t *testing.T) {
	if testing.Short() {
		t.Skip("the jitter fleet runs for several seconds per run")
	}
	rate, d, procs := fleetEnv(t)
	if os.Getenv("FLEET_RATE") == "" {
		rate = 100
	}
	runs := 3
	if v := os.Getenv("FLEET_JITTER_RUNS"); v != "" {
		var err error
		runs, err = strconv.Atoi(v)
		require.NoError(t, err, "FLEET_JITTER_RUNS")
		require.Positive(t, runs, "FLEET_JITTER_RUNS")
	}
	const (
		margin  = 10 * time.Millisecond
		workers = 4
		// maxAfterFirst bounds the 429s after a run's first: the first
		// teaches the fleet the margin the path needs.
		maxAfterFirst = 0
	)
	path := jitterproxy.Path{Min: 2 * time.Millisecond, Max: 8 * time.Millisecond, Handshake: 10 * time.Millisecond, KeepAlive: 50}
	dir := buildExamples(t)
	srv, rdb := startRedis(t)

	var table strings.Builder
	fmt.Fprintf(&table, "\nexact sliding log %d/s over a path of 5 ± 3 ms + a 10 ms handshake, margin %s, %d x %d workers, %s per run\n",
		rate, margin, procs, workers, d)
	fmt.Fprintf(&table, "%-4s %-6s %-26s %-8s %-14s %-16s %-6s %s\n", "run", "429s", "429s sent after the first", "share", "after pause", "margin learned", "conns", "first 429 at")
	var totals, afters []int
	var shares []float64
	for i := range runs {
		ctx := context.Background()
		require.NoError(t, rdb.FlushAll(ctx).Err())
		base, stats := startUpstream(t, filepath.Join(dir, "strictapi"), throttletest.Config{N: rate, Window: time.Second}, "")
		proxy, err := jitterproxy.Start(base, path)
		require.NoError(t, err)

		var mu sync.Mutex
		var feedback []string
		var refused [][2]time.Time // the 429s seen by the clients: when written, when answered
		rule := throttle.Rule{
			Name:    "payments",
			Limits:  []throttle.Limit{throttle.PerSecond(rate)},
			Key:     throttle.Fixed("pg1"),
			Margin:  margin,
			MaxWait: time.Minute,
		}
		tally := examplekit.NewTally(nil)
		runCtx, cancel := context.WithTimeout(ctx, d)
		start := time.Now()
		var wg sync.WaitGroup
		for p := range procs {
			c := srv.Client(t)
			st, err := store.NewRedis(c)
			require.NoError(t, err)
			// A user's default: at most two idle connections per host,
			// so that four workers open new ones now and then.
			conns := http.DefaultTransport.(*http.Transport).Clone()
			tr, err := throttle.New(conns, st, throttle.WithDefault(rule),
				throttle.WithOnDecision(tally.OnDecision),
				throttle.WithOnFeedback(func(fb throttle.Feedback) {
					if fb.Throttled || fb.Paced.N > 0 {
						mu.Lock()
						feedback = append(feedback, fmt.Sprintf("+%s process %d: %d pause=%s paced=%s",
							time.Since(start).Round(time.Millisecond), p, fb.Status, fb.Pause, fb.Paced))
						mu.Unlock()
					}
				}))
			require.NoError(t, err)
			client := &http.Client{Transport: tr}
			target := proxy.URL() + "/v1/charges"
			wg.Go(func() {
				defer conns.CloseIdleConnections()
				tally.Drive(runCtx, workers, func(ctx context.Context, _, _ int) (*http.Response, error) {
					var wrote time.Time
					trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote = time.Now() }}
					req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, target, strings.NewReader(`{"amount":1000}`))
					if err != nil {
						return nil, err
					}
					resp, err := client.Do(req)
					if err == nil && resp.StatusCode == http.StatusTooManyRequests {
						mu.Lock()
						refused = append(refused, [2]time.Time{wrote, time.Now()})
						mu.Unlock()
					}
					return resp, err
				})
			})
		}
		wg.Wait()
		end := time.Now()
		cancel()
		proxy.Close()
		st := stats(false).Total
		c := tally.Counts()
		require.Zero(t, c.Errors, "errors: %v", c.FirstError)
		require.Zero(t, c.Limited, "requests refused by the limit in wait mode")

		// The 429s after the first: of requests written after a process
		// had the first 429's answer (the ones in flight then could not
		// learn from it), and all of them.
		after, heard := 0, time.Time{}
		for _, r := range refused {
			if heard.IsZero() || r[1].Before(heard) {
				heard = r[1]
			}
		}
		for _, r := range refused {
			if r[0].After(heard) {
				after++
			}
		}
		share := float64(st.Accepted) / float64(pacedOptimum(rate, time.Second, defaultPaceBurst, st.FirstAccepted, end))
		first := "-"
		if len(st.RejectedAt) > 0 {
			first = "+" + st.RejectedAt[0].Sub(st.FirstAccepted).Round(time.Millisecond).String()
		}
		// What the fleet learned: the margin beyond the rule's, in the
		// key's feedback hash (µs); and the share of the rate after the
		// first 429's pause (Retry-After: 1), or after the first second.
		learned := "-"
		keys, err := rdb.Keys(ctx, "*:p").Result()
		require.NoError(t, err)
		for _, k := range keys {
			if xm, err := rdb.HGet(ctx, k, "xm").Int64(); err == nil {
				learned = (time.Duration(xm) * time.Microsecond).String()
			}
		}
		from := st.FirstAccepted.Add(time.Second)
		if len(st.RejectedAt) > 0 {
			from = st.RejectedAt[0].Add(time.Second)
		}
		later := 0
		for _, a := range st.Arrivals {
			if a.After(from) {
				later++
			}
		}
		steady := float64(later) / (end.Sub(from).Seconds() * float64(rate))
		totals, afters, shares = append(totals, st.Rejected), append(afters, after), append(shares, share)
		fmt.Fprintf(&table, "%-4d %-6d %-26d %-8s %-14s %-16s %-6d %s\n", i+1, st.Rejected, after,
			fmt.Sprintf("%.1f%%", 100*share), fmt.Sprintf("%.1f%%", 100*steady), "+"+learned, proxy.Conns(), first)
		for _, r := range st.RejectedAt {
			t.Logf("run %d: 429 at +%s", i+1, r.Sub(st.FirstAccepted).Round(time.Millisecond))
		}
		explain429(t, st, rate, time.Second)
		for _, f := range feedback {
			t.Logf("run %d: %s", i+1, f)
		}
		if after > maxAfterFirst {
			t.Errorf("run %d: %d 429s after the first: more than %d", i+1, after, maxAfterFirst)
		}
	}
	sorted := slices.Clone(shares)
	slices.Sort(sorted)
	fmt.Fprintf(&table, "429s per run: %v; sent after the first was answered: %v; share: median %.1f%%, range %.1f-%.1f%%\n",
		totals, afters, 100*sorted[len(sorted)/2], 100*sorted[0], 100*sorted[len(sorted)-1])
	t.Log(table.String())
}
