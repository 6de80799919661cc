//go:build integration

package throttle_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

// between counts the calls to s in (from, to).
func between(s *fakestore.Store, from, to time.Time) int {
	times, _ := s.Calls()
	n := 0
	for _, t := range times {
		if t.After(from) && t.Before(to) {
			n++
		}
	}
	return n
}

type stamped struct {
	at time.Time
	d  throttle.Decision
}

// TestRedisRestart kills redis-server while a fleet of workers sends through
// it, and starts it again on the same port after longer than a window (it
// comes back empty, as a restarted cache does). Each worker has its own
// Transport and Redis client, as separate processes would. Under each policy
// it checks what the strict upstream saw, that a down store is not called by
// every request, and that the workers use Redis again soon after it returns;
// the goroutine leak check of TestMain covers the whole run.
//
// Figures: go test -race -tags integration -run TestRedisRestart -v -count 3 .
func TestRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts redis-server; several seconds")
	}
	const (
		workers = 4
		n       = 40
		window  = 500 * time.Millisecond
		before  = 1500 * time.Millisecond // run before the kill
		outage  = 3 * time.Second         // longer than window + margin + store timeout
		after   = 3 * time.Second         // run after the restart
	)
	// The check of send times can fail: three sends in 1s against 2 per 1s.
	t0 := time.Now()
	three := []sendRecord{{at: t0, cost: 1}, {at: t0.Add(500 * time.Millisecond), cost: 1}, {at: t0.Add(999 * time.Millisecond), cost: 1}}
	require.Len(t, overfilledEnds(three, 2, time.Second), 1)
	require.Empty(t, overfilledEnds(three, 3, time.Second))
	require.Empty(t, overfilledEnds(three, 2, 999*time.Millisecond))

	// slack covers this machine's scheduling noise in the checks of when
	// 429s may happen; it is not a measure of anything.
	const slack = 300 * time.Millisecond
	for _, tc := range []struct {
		policy storePolicy
		// defaults uses go-redis' default options; otherwise the client
		// fails fast on a closed port (DialerRetries: 1), as the README
		// recommends.
		defaults bool
	}{
		{failClosed, false},
		{failOpen, false},
		{failLocal, false},
		{failClosed, true},
	} {
		policy := tc.policy
		name := string(policy)
		if tc.defaults {
			name += "/go-redis-defaults"
		}
		t.Run(name, func(t *testing.T) {
			srv, err := redistest.StartServer()
			if err != nil {
				if redistest.InCI() {
					t.Fatalf("CI is set but redis-server could not be started: %v", err)
				}
				t.Skipf("needs a real redis-server on PATH: %v", err)
			}
			t.Cleanup(srv.Close)

			up, err := throttletest.NewUpstream(throttletest.Config{N: n, Window: window})
			require.NoError(t, err)
			hs := httptest.NewServer(up)
			t.Cleanup(hs.Close)
			ht := &http.Transport{MaxIdleConnsPerHost: workers}
			t.Cleanup(ht.CloseIdleConnections)
			// base records every send: the guarantee is about send times,
			// which this machine's load cannot blur as it blurs arrivals.
			var sendMu sync.Mutex
			var sends []sendRecord
			base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
				sendMu.Lock()
				sends = append(sends, sendRecord{at: time.Now(), key: "api", cost: 1})
				sendMu.Unlock()
				return ht.RoundTrip(r)
			})

			var (
				mu        sync.Mutex
				decisions = make([][]stamped, workers)
				logs      = make([]*fakestore.Store, workers)
				clients   = make([]*http.Client, workers)
			)
			for w := range workers {
				ro := &redis.Options{Addr: srv.Addr, DialerRetries: 1}
				if tc.defaults {
					ro = &redis.Options{Addr: srv.Addr}
				}
				rdb := redis.NewClient(ro)
				t.Cleanup(func() { _ = rdb.Close() })
				rs, err := store.NewRedis(rdb)
				require.NoError(t, err)
				logs[w] = fakestore.Wrap(rs)
				opts := []throttle.Option{
					throttle.WithRule(throttle.Rule{Name: "restart", Host: "127.0.0.1", Key: throttle.Fixed("api"),
						Limits: []throttle.Limit{throttle.Per(n, window)},
						// The upstream runs inside this race-instrumented
						// binary, slow and uneven to see requests (the fleet
						// test runs it as its own process instead): a wider
						// margin keeps the steady state clean, so that the
						// test is about the outage.
						Margin: 100 * time.Millisecond}),
					throttle.WithOnDecision(func(d throttle.Decision) {
						mu.Lock()
						defer mu.Unlock()
						decisions[w] = append(decisions[w], stamped{time.Now(), d})
					}),
				}
				opts = append(opts, policy.options(1.0/workers)...)
				tr, err := throttle.New(base, logs[w], opts...)
				require.NoError(t, err)
				clients[w] = &http.Client{Transport: tr}
			}

			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for ctx.Err() == nil {
						rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
						req, err := http.NewRequestWithContext(rctx, http.MethodGet, hs.URL+"/v1/items", nil)
						if err != nil {
							cancel()
							panic(err)
						}
						resp, err := clients[w].Do(req)
						if err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						if err != nil || resp.StatusCode == http.StatusTooManyRequests {
							// A refused request: a real worker backs off a
							// little (and the test leaves the CPU to others).
							select {
							case <-ctx.Done():
							case <-time.After(10 * time.Millisecond):
							}
						}
						cancel()
					}
				})
			}

			time.Sleep(before)
			killed := time.Now()
			require.NoError(t, srv.Kill())
			time.Sleep(outage)
			restarting := time.Now()
			require.NoError(t, srv.Restart())
			restarted := time.Now()
			time.Sleep(after)
			stop()
			wg.Wait()
			end := time.Now()

			stats := up.Stats().Total
			mu.Lock()
			defer mu.Unlock()

			// Recovery: each worker's first request after the restart that
			// Redis decided.
			var recovery []time.Duration
			outcomes := map[string]int{}
			for w := range workers {
				first := time.Time{}
				for _, s := range decisions[w] {
					if s.at.After(killed) && s.at.Before(restarting) {
						key := s.d.Outcome.String()
						if s.d.Local {
							key += "+local"
						}
						outcomes[key]++
					}
					if first.IsZero() && s.at.After(restarting) && s.d.Outcome == throttle.Sent && !s.d.Local {
						first = s.at
					}
				}
				if first.IsZero() {
					var tail []string
					for _, s := range decisions[w] {
						if s.at.After(restarting) {
							tail = append(tail, s.at.Sub(restarting).Round(time.Millisecond).String()+" "+s.d.Outcome.String()+" "+fmt.Sprint(s.d.Err))
						}
					}
					require.Fail(t, "a worker never used Redis again", "worker %d, decisions after the restart: %v", w, tail)
				}
				recovery = append(recovery, first.Sub(restarting))
			}
			slices.Sort(recovery)
			restartTook := restarted.Sub(restarting)
			t.Logf("%s: restart took %s (exec to PING); workers used Redis again %v after it began (the last %s after Restart returned)",
				name, restartTook.Round(time.Millisecond), roundAll(recovery), (recovery[workers-1] - restartTook).Round(time.Millisecond))

			// A down store is not called by every request.
			refusedOrLocal, calls := 0, 0
			for w := range workers {
				calls += between(logs[w], killed.Add(100*time.Millisecond), restarting)
			}
			for k, c := range outcomes {
				if k != throttle.Sent.String() { // sends of slots reserved before the kill
					refusedOrLocal += c
				}
			}
			t.Logf("%s: during the outage, decisions %v; store calls %d (probes)", name, outcomes, calls)
			// Each transport calls the store at most once per backoff
			// interval (from 40ms, doubling, to 400-600ms), one call at a
			// time: about 10 calls in 3s, whatever the load.
			assert.LessOrEqual(t, calls, 12*workers, "a down store is called by probes only")
			if !tc.defaults && policy != failLocal {
				assert.Greater(t, refusedOrLocal, 10*calls, "requests during the outage must not all call the store")
			}

			// What the upstream saw.
			// The switches: from the kill until every worker has seen the
			// store fail (at most the store timeout) and a window more;
			// from the restart until every worker uses Redis again and a
			// window more.
			killEnd := killed.Add(throttle.DefaultStoreTimeout + window + slack)
			restartEnd := restarting.Add(recovery[workers-1] + window + slack)
			var rejectedSteady, rejectedAtKill, rejectedAtRestart, rejectedAllLocal int
			var elsewhere []time.Duration
			for _, at := range stats.RejectedAt {
				if at.After(killEnd) && at.Before(restarting) {
					rejectedAllLocal++ // every worker has switched, none is back
				}
				switch {
				case at.After(killed) && at.Before(killEnd):
					rejectedAtKill++
				case at.After(restarting) && at.Before(restartEnd):
					rejectedAtRestart++
				default:
					rejectedSteady++
					elsewhere = append(elsewhere, at.Sub(killed))
				}
			}
			accepted := len(stats.Arrivals)
			t.Logf("%s: upstream accepted %d and answered 429 to %d in %s: %d while switching to local after the kill, %d while switching back after the restart, %d elsewhere",
				name, accepted, stats.Rejected, end.Sub(killed.Add(-before)).Round(100*time.Millisecond),
				rejectedAtKill, rejectedAtRestart, rejectedSteady)

			switch policy {
			case failClosed:
				// The guarantee, on the send times: no window of W ever held
				// more than N sends, before, during or after the outage.
				sendMu.Lock()
				// The windows that end from the kill to a window after the
				// last worker is back are the outage's; a late send in the
				// steady state elsewhere (a stall longer than the margin,
				// which this machine has when loaded by other builds) is
				// the core's known limit (README), logged.
				var outageBad, otherBad []string
				for _, b := range overfilledEnds(sends, n, window) {
					if b.end.After(killed) && b.end.Before(restartEnd) {
						outageBad = append(outageBad, b.what)
					} else {
						otherBad = append(otherBad, b.what)
					}
				}
				assert.Empty(t, outageBad, "the kill was at %s, the restart at %s", killed.Format("15:04:05.000000"), restarting.Format("15:04:05.000000"))
				if len(otherBad) > 0 {
					t.Logf("%s: away from the outage (kill at %s): %v", name, killed.Format("15:04:05.000000"), otherBad)
				}
				sendMu.Unlock()
				// And at the upstream, which sees arrivals: none during the
				// outage. Elsewhere a 429 with the send times within the
				// limit can only come from a request arriving later than
				// the margin after its send, which this machine does when
				// loaded by other builds; it is logged.
				var during []time.Duration
				for _, at := range stats.RejectedAt {
					if at.After(killed) && at.Before(restarting) {
						during = append(during, at.Sub(killed))
					}
				}
				assert.Empty(t, during, "fail closed: no 429 during the outage (times from the kill)")
				if n := stats.Rejected - len(during); n > 0 {
					t.Logf("%s: %d 429s outside the outage, at %v from the kill (the restart at %s), with the send times within the limit: arrivals later than the margin",
						name, n, elsewhere, restarting.Sub(killed).Round(time.Millisecond))
				}
				assert.Zero(t, outcomes["sent+local"]+outcomes["failed_open"])
				assert.Positive(t, outcomes["failed"])
			case failOpen:
				// Uncounted sends: the upstream refuses the excess, during the
				// outage and in the window after the restart (Redis came back
				// empty, knowing nothing of them).
				assert.Positive(t, outcomes["failed_open"])
				assert.Positive(t, stats.Rejected)
			case failLocal:
				// With share 1/workers, every worker local: the upstream sees
				// at most the limit, except in the window after each switch
				// (see the README).
				assert.Positive(t, outcomes["sent+local"])
				assert.Zero(t, rejectedAllLocal, "local shares of 1/workers must keep the upstream within its limit once all are local")
				if rejectedSteady > 0 {
					t.Logf("%s: %d 429s away from the switches, at %v from the kill", name, rejectedSteady, elsewhere)
				}
			}
			// Nothing is lost: every request was decided and the run went on.
			assert.Positive(t, len(stats.Arrivals))
		})
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

type overfill struct {
	end  time.Time
	what string
}

// overfilledEnds is overfilled, with the end of each window that holds more
// than n units.
func overfilledEnds(sends []sendRecord, n int, w time.Duration) []overfill {
	ss := slices.Clone(sends)
	slices.SortFunc(ss, func(a, b sendRecord) int { return a.at.Compare(b.at) })
	var out []overfill
	lo := 0
	for i, s := range ss {
		for !ss[lo].at.After(s.at.Add(-w)) {
			lo++
		}
		units := 0
		for _, x := range ss[lo : i+1] {
			units += x.cost
		}
		if units > n {
			out = append(out, overfill{s.at, fmt.Sprintf("%d units in (%s, %s]", units,
				s.at.Add(-w).Format("15:04:05.000000"), s.at.Format("15:04:05.000000"))})
		}
	}
	return out
}
