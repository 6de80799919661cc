package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestWaitMode checks the delays of waiting for a slot (no FailFast) to the microsecond.
func TestWaitMode(t *testing.T) {
	t.Parallel()
	const n, w = 3, 200 * time.Millisecond
	tests := []struct {
		name   string
		margin time.Duration
		want   time.Duration
	}{
		{name: "no margin", margin: throttle.NoMargin, want: w},
		{name: "default margin", margin: 0, want: w + throttle.DefaultMargin},
		{name: "explicit margin", margin: 25 * time.Millisecond, want: w + 25*time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				var decisions decisionLog
				tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
					Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(n, w)}, Margin: tc.margin,
				}))
				start := time.Now()
				for range n {
					assert.Zero(t, elapsed(func() { send(t, tr, testURL) }))
				}
				assert.Equal(t, tc.want, elapsed(func() { send(t, tr, testURL) }), "the (N+1)-th request")
				d := decisions.last(t)
				assert.Equal(t, throttle.Sent, d.Outcome)
				assert.Equal(t, tc.want, d.Delay)
				assert.Equal(t, throttle.Per(n, w), d.Limit)
				assert.Equal(t, "host:api.example.com", d.Key)
				require.Equal(t, n+1, sent.count())
				assert.Equal(t, tc.want, sent.times[n].Sub(start))
			})
		})
	}
}

// TestWaitModeRefusals checks that a slot too far away is refused at once.
func TestWaitModeRefusals(t *testing.T) {
	t.Parallel()
	const w = 100 * time.Millisecond
	tests := []struct {
		name    string
		maxWait time.Duration
		timeout time.Duration
		wantErr bool
		// beyond: the deadline refused the request, not MaxWait
		// (LimitError.BeyondDeadline); overMax: MaxWait refused it
		// (LimitError.BeyondMaxWait).
		beyond, overMax bool
	}{
		{name: "slot within MaxWait", maxWait: w},
		{name: "slot beyond MaxWait", maxWait: w - time.Microsecond, wantErr: true, overMax: true},
		{name: "slot before the deadline", timeout: w + time.Millisecond},
		{name: "slot beyond the deadline", timeout: w - time.Millisecond, wantErr: true, beyond: true},
		{name: "deadline nearer than MaxWait", maxWait: time.Hour, timeout: w / 2, wantErr: true, beyond: true},
		{name: "MaxWait nearer than deadline", maxWait: w / 2, timeout: time.Hour, wantErr: true, overMax: true},
		{name: "slot beyond both", maxWait: w / 2, timeout: w / 4, wantErr: true, overMax: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
					Name: "r", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(1, w)},
					Key: throttle.Fixed("k"), MaxWait: tc.maxWait, Margin: throttle.NoMargin,
				}))
				send(t, tr, testURL)
				ctx := context.Background()
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				req, _ := newRequest(t, ctx, http.MethodGet, testURL)
				var err error
				took := elapsed(func() { _, err = tr.RoundTrip(req) })
				if !tc.wantErr {
					require.NoError(t, err)
					assert.Equal(t, w, took)
					assert.Equal(t, 2, sent.count())
					return
				}
				assert.Zero(t, took)
				var le *throttle.LimitError
				require.ErrorAs(t, err, &le)
				assert.Equal(t, throttle.LimitError{Rule: "r", Key: "k", Limit: throttle.Per(1, w), RetryAfter: w, BeyondDeadline: tc.beyond, BeyondMaxWait: tc.overMax}, *le)
				assert.Equal(t, tc.beyond, strings.HasSuffix(le.Error(), ", beyond the context's deadline"), le.Error())
				assert.Equal(t, tc.overMax, strings.HasSuffix(le.Error(), ", beyond the rule's MaxWait"), le.Error())
				assert.Equal(t, 1, sent.count())

				// Nothing was recorded: a request after the window is sent at once.
				time.Sleep(w)
				assert.Zero(t, elapsed(func() { send(t, tr, testURL) }))
			})
		})
	}
}

// TestFailFast checks that FailFast refuses at once, with RetryAfter.
func TestFailFast(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
			Name: "ff", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(2, time.Second)},
			Key: throttle.Fixed("gw"), FailFast: true, Margin: throttle.NoMargin,
		}))
		send(t, tr, testURL)
		time.Sleep(300 * time.Millisecond)
		send(t, tr, testURL)

		req, body := newRequest(t, context.Background(), http.MethodGet, testURL)
		var err error
		assert.Zero(t, elapsed(func() { _, err = tr.RoundTrip(req) }))
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, 700*time.Millisecond, le.RetryAfter)
		assert.Equal(t, int32(1), body.closes.Load())

		time.Sleep(le.RetryAfter)
		send(t, tr, testURL)
		assert.Equal(t, 3, sent.count())
	})
}

// TestCancelGivesSlotBack checks that a request whose context ends while it
// waits returns the context's error and gives its slot to the next request.
func TestCancelGivesSlotBack(t *testing.T) {
	t.Parallel()
	const w = 100 * time.Millisecond
	tests := []struct {
		name   string
		limits []throttle.Limit
	}{
		{
			name:   "binding limit below the longest",
			limits: []throttle.Limit{throttle.Per(1, w), throttle.Per(100, time.Hour)},
		},
		{
			// The log holds just N entries when the slot is reserved: the
			// cancel must still not free the unit sent at t=0.
			name:   "single limit",
			limits: []throttle.Limit{throttle.Per(1, w)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				var decisions decisionLog
				tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
					Host: "api.example.com", Limits: tc.limits, Key: throttle.Fixed("k"), Margin: throttle.NoMargin,
					NoDefaultPace: true, // the window limits alone: their slot comes back
				}))
				send(t, tr, testURL) // t=0: fills the window up to t=w

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, body := newRequest(t, ctx, http.MethodGet, testURL)
				errc := make(chan error, 1)
				go func() {
					_, err := tr.RoundTrip(req) // reserves the slot at t=w
					errc <- err
				}()
				time.Sleep(w / 4)
				synctest.Wait()
				require.Empty(t, errc, "the request must still be waiting")
				cancel()
				synctest.Wait()
				require.ErrorIs(t, <-errc, context.Canceled)
				assert.Equal(t, int32(1), body.closes.Load())
				d := decisions.last(t)
				assert.Equal(t, throttle.Canceled, d.Outcome)
				assert.Equal(t, w, d.Delay)

				// The next request gets the cancelled slot, w from the start,
				// not the one after it.
				assert.Equal(t, w-w/4, elapsed(func() { send(t, tr, testURL) }))
				assert.Equal(t, 2, sent.count())
			})
		})
	}
}

// TestSeveralLimits checks that the binding limit sets the delay and is named.
func TestSeveralLimits(t *testing.T) {
	t.Parallel()
	fast, slow := throttle.Per(2, 100*time.Millisecond), throttle.Per(5, time.Second)
	limits := []throttle.Limit{fast, slow}

	t.Run("wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var sent sendLog
			var decisions decisionLog
			tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
				Host: "api.example.com", Limits: limits, Margin: throttle.NoMargin,
			}))
			ms := time.Millisecond
			want := []struct {
				delay time.Duration
				limit throttle.Limit
			}{
				{0, throttle.Limit{}},
				{0, throttle.Limit{}},
				{100 * ms, fast},
				{0, throttle.Limit{}},
				{100 * ms, fast},
				{800 * ms, slow},
				{0, throttle.Limit{}},
				{100 * ms, fast},
			}
			for range want {
				send(t, tr, testURL)
			}
			got := decisions.all()
			require.Len(t, got, len(want))
			for i, w := range want {
				assert.Equal(t, w.delay, got[i].Delay, "request %d", i+1)
				assert.Equal(t, w.limit, got[i].Limit, "request %d", i+1)
			}
			start := sent.times[0]
			var at []time.Duration
			for _, s := range sent.times {
				at = append(at, s.Sub(start))
			}
			assert.Equal(t, []time.Duration{0, 0, 100 * ms, 100 * ms, 200 * ms, 1000 * ms, 1000 * ms, 1100 * ms}, at)
		})
	})

	t.Run("fail fast", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var sent sendLog
			tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
				Name: "two", Host: "api.example.com", Limits: limits, FailFast: true, Margin: throttle.NoMargin,
			}))
			refused := func() *throttle.LimitError {
				t.Helper()
				req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
				_, err := tr.RoundTrip(req)
				var le *throttle.LimitError
				require.ErrorAs(t, err, &le)
				return le
			}
			send(t, tr, testURL)
			send(t, tr, testURL)
			le := refused()
			assert.Equal(t, fast, le.Limit)
			assert.Equal(t, 100*time.Millisecond, le.RetryAfter)
			assert.Contains(t, le.Error(), "limit 2/100ms")

			time.Sleep(100 * time.Millisecond)
			send(t, tr, testURL)
			send(t, tr, testURL)
			time.Sleep(100 * time.Millisecond)
			send(t, tr, testURL)
			le = refused()
			assert.Equal(t, slow, le.Limit)
			assert.Equal(t, 800*time.Millisecond, le.RetryAfter)
			assert.Contains(t, le.Error(), "limit 5/1s")
			assert.Equal(t, 5, sent.count())
		})
	})
}

// TestCost checks that a request takes the units its cost function says.
func TestCost(t *testing.T) {
	t.Parallel()
	costOf := func(r *http.Request) int {
		n, err := strconv.Atoi(r.Header.Get("X-Cost"))
		if err != nil {
			return 1
		}
		return n
	}
	newCostly := func(t *testing.T) (*throttle.Transport, *sendLog, *decisionLog) {
		var sent sendLog
		var decisions decisionLog
		tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
			Name: "c", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(5, time.Second), throttle.Per(9, time.Hour)},
			Key: throttle.Fixed("k"), Cost: costOf, FailFast: true, Margin: throttle.NoMargin,
		}))
		return tr, &sent, &decisions
	}
	try := func(t *testing.T, tr http.RoundTripper, cost int) (*trackedBody, error) {
		req, body := newRequest(t, context.Background(), http.MethodPost, testURL)
		req.Header.Set("X-Cost", strconv.Itoa(cost))
		_, err := tr.RoundTrip(req)
		return body, err
	}

	t.Run("units", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tr, sent, decisions := newCostly(t)
			_, err := try(t, tr, 3)
			require.NoError(t, err)
			assert.Equal(t, 3, decisions.last(t).Cost)
			_, err = try(t, tr, 3)
			assert.ErrorIs(t, err, throttle.ErrLimited, "3+3 > 5")
			_, err = try(t, tr, 2)
			require.NoError(t, err, "3+2 = 5")
			_, err = try(t, tr, 1)
			assert.ErrorIs(t, err, throttle.ErrLimited, "5+1 > 5")
			assert.Equal(t, 2, sent.count())
		})
	})

	for _, cost := range []int{0, -1, 6, 100} {
		t.Run("invalid "+strconv.Itoa(cost), func(t *testing.T) {
			tr, sent, decisions := newCostly(t)
			body, err := try(t, tr, cost)
			require.ErrorIs(t, err, throttle.ErrInvalidCost)
			assert.NotErrorIs(t, err, throttle.ErrLimited)
			assert.Contains(t, err.Error(), "cost "+strconv.Itoa(cost)+" is outside 1..5")
			assert.Zero(t, sent.count())
			assert.Equal(t, int32(1), body.closes.Load())
			assert.Equal(t, throttle.Failed, decisions.last(t).Outcome)

			// Nothing was recorded: the full limit is still free.
			_, err = try(t, tr, 5)
			assert.NoError(t, err)
		})
	}
}

// sendRecord is one request as the fake upstream saw it.
type sendRecord struct {
	at     time.Time
	key    string
	cost   int
	worker int
}

// fleetPlan is a random workload: the limits of one rule, and what each
// worker sends.
type fleetPlan struct {
	limits  []throttle.Limit
	maxWait time.Duration
	workers [][]planned
}

type planned struct {
	pause       time.Duration // before the request
	cost        int
	tenant      string
	timeout     time.Duration // context deadline, if > 0
	cancelAfter time.Duration // context cancelled after this, if > 0
}

// randomPlan draws a workload from rng; every duration is a whole number of
// milliseconds so that send times and slots agree to the nanosecond.
func randomPlan(rng *rand.Rand, workers, perWorker int) fleetPlan {
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond }
	var p fleetPlan
	for range 1 + rng.IntN(3) {
		p.limits = append(p.limits, throttle.Per(3+rng.IntN(18), ms(10, 2000)))
	}
	p.maxWait = ms(50, 5000)
	tenants := []string{"acme", "globex"}
	for range workers {
		var w []planned
		for range perWorker {
			q := planned{pause: ms(0, 300), cost: 1 + rng.IntN(3), tenant: tenants[rng.IntN(len(tenants))]}
			switch r := rng.IntN(10); {
			case r == 0:
				q.timeout = ms(1, 1000)
			case r == 1:
				q.cancelAfter = ms(1, 1000)
			}
			w = append(w, q)
		}
		p.workers = append(p.workers, w)
	}
	return p
}

// runFleet sends p through one Transport on the memory store, in a synctest
// bubble, with the given limits and margin, and returns what the upstream
// received.
func runFleet(t *testing.T, p fleetPlan, limits []throttle.Limit, margin time.Duration) []sendRecord {
	var (
		mu    sync.Mutex
		sends []sendRecord
	)
	synctest.Test(t, func(t *testing.T) {
		base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			cost, err := strconv.Atoi(r.Header.Get("X-Cost"))
			if err != nil {
				return nil, err
			}
			worker, err := strconv.Atoi(r.Header.Get("X-Worker"))
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			sends = append(sends, sendRecord{at: time.Now(), key: r.Header.Get("X-Tenant"), cost: cost, worker: worker})
			return okResponse(r), nil
		})
		tr := newTransport(t, base, nil, throttle.WithRule(throttle.Rule{
			Host: "api.example.com", Limits: limits, Key: throttle.ByHeader("X-Tenant"),
			Cost: func(r *http.Request) int {
				n, _ := strconv.Atoi(r.Header.Get("X-Cost"))
				return n
			},
			MaxWait: p.maxWait, Margin: margin,
		}))
		var wg sync.WaitGroup
		for i, w := range p.workers {
			wg.Go(func() {
				for _, q := range w {
					time.Sleep(q.pause)
					ctx, cancel := context.WithCancel(context.Background())
					if q.timeout > 0 {
						ctx, cancel = context.WithTimeout(ctx, q.timeout)
					}
					if q.cancelAfter > 0 {
						timer := time.AfterFunc(q.cancelAfter, cancel)
						defer timer.Stop()
					}
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/x", http.NoBody)
					if err != nil {
						panic(err)
					}
					req.Header.Set("X-Tenant", q.tenant)
					req.Header.Set("X-Cost", strconv.Itoa(q.cost))
					req.Header.Set("X-Worker", strconv.Itoa(i))
					_, err = tr.RoundTrip(req)
					cancel()
					if err != nil && !errors.Is(err, throttle.ErrLimited) && !errors.Is(err, context.Canceled) &&
						!errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("worker %d: unexpected error %v", i, err)
					}
				}
			})
		}
		wg.Wait()
	})
	return sends
}

// overfilled returns a description of every window (t-w, t] of sends, per
// key, that holds more than n units.
func overfilled(sends []sendRecord, n int, w time.Duration) []string {
	byKey := map[string][]sendRecord{}
	for _, s := range sends {
		byKey[s.key] = append(byKey[s.key], s)
	}
	var bad []string
	for key, ss := range byKey {
		slices.SortFunc(ss, func(a, b sendRecord) int { return a.at.Compare(b.at) })
		// Only windows ending at a send time can hold a maximum.
		for i := range ss {
			end := ss[i].at
			units := 0
			for _, s := range ss {
				if s.at.After(end.Add(-w)) && !s.at.After(end) {
					units += s.cost
				}
			}
			if units > n {
				bad = append(bad, fmt.Sprintf("key %s: %d units in (%s, %s]", key, units,
					end.Add(-w).Format("15:04:05.000000"), end.Format("15:04:05.000000")))
			}
		}
	}
	return bad
}

// TestPropertyNoWindowOverfilled is the guarantee, tested: whatever the
// limits, costs, timing and cancellations, no window of any limit ever holds
// more than its N units at the upstream.
func TestPropertyNoWindowOverfilled(t *testing.T) {
	t.Parallel()
	margins := []struct {
		name   string
		margin time.Duration // the Rule's Margin
		extra  time.Duration // what it adds to every window
	}{
		{name: "no margin", margin: throttle.NoMargin},
		{name: "default margin", margin: 0, extra: throttle.DefaultMargin},
	}
	for _, m := range margins {
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("%s/seed %d", m.name, seed), func(t *testing.T) {
				t.Logf("seed %d", seed)
				p := randomPlan(rand.New(rand.NewPCG(seed, 0x7468726f74746c65)), 50, 4)
				t.Logf("limits %v, MaxWait %s", p.limits, p.maxWait)
				sends := runFleet(t, p, p.limits, m.margin)
				require.NotEmpty(t, sends)
				for _, l := range p.limits {
					// The margin widens every window: the guarantee holds
					// for W + margin, hence for W.
					bad := overfilled(sends, l.N, l.Per+m.extra)
					assert.Empty(t, bad, "limit %s", l)
				}
			})
		}
	}

	// The check has teeth: the same workloads through a transport whose
	// every limit allows one unit more are caught. It also caught the store
	// of commit 00ec52d, whose count trim let a Cancel free a unit still
	// inside a window ("no margin/seed 4": 22 units in a window of 15).
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("weakened limit is caught/seed %d", seed), func(t *testing.T) {
			p := randomPlan(rand.New(rand.NewPCG(seed, 0x7468726f74746c65)), 50, 4)
			weak := slices.Clone(p.limits)
			for i := range weak {
				weak[i].N++
			}
			sends := runFleet(t, p, weak, throttle.NoMargin)
			var bad []string
			for _, l := range p.limits {
				bad = append(bad, overfilled(sends, l.N, l.Per)...)
			}
			assert.NotEmpty(t, bad, "limits %v: N+1 sends went unnoticed", p.limits)
		})
	}
}
