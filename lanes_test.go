package throttle_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// laneRule is 10 per second on one key, with two lanes read from the
// X-Lane header ("1": interactive).
func laneRule(lanes int) throttle.Rule {
	r := throttle.Rule{
		Name: "lanes", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(10, time.Second)},
		Key: throttle.Fixed("gw"), Margin: throttle.NoMargin, NoDefaultPace: true,
	}
	if lanes > 0 {
		r.Lanes = lanes
		r.Lane = func(req *http.Request) int {
			if req.Header.Get("X-Lane") == "1" {
				return 1
			}
			return 0
		}
	}
	return r
}

// TestLaneTakesABackfillSlot: twenty backfill requests fill this second and
// the next; an interactive request at 50ms takes the first backfill slot of
// the next second (1s) rather than queue behind them all (2s), and the
// backfill request it bumped goes one slot later. Without lanes it waits
// until 2s. Every window holds at most 10.
func TestLaneTakesABackfillSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lanes int
		wait  time.Duration
	}{
		{"without lanes", 0, 1950 * time.Millisecond},
		{"with lanes", 2, 950 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				var decisions decisionLog
				tr := newTransport(t, sent.base(), nil, throttle.WithRule(laneRule(tc.lanes)), decisions.option())
				var wg sync.WaitGroup
				for range 20 {
					wg.Go(func() { send(t, tr, testURL) })
				}
				synctest.Wait()
				time.Sleep(50 * time.Millisecond)
				req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
				req.Header.Set("X-Lane", "1")
				var resp *http.Response
				var err error
				took := elapsed(func() { resp, err = tr.RoundTrip(req) })
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, tc.wait, took)
				wg.Wait()
				assert.Equal(t, 21, sent.count())

				took2, bumped := 0, 0
				for _, d := range decisions.all() {
					if d.Took {
						took2++
						assert.Equal(t, 1, d.Lane)
					}
					bumped += d.Bumped
				}
				if tc.lanes > 0 {
					assert.Equal(t, 1, took2)
					assert.Equal(t, 1, bumped, "the backfill request whose slot was taken went one slot later")
				}
				// No window of a second holds more than 10 sends.
				sent.mu.Lock()
				times := append([]time.Time(nil), sent.times...)
				sent.mu.Unlock()
				for i := range times {
					n := 0
					for _, u := range times {
						if !u.Before(times[i]) && u.Before(times[i].Add(time.Second)) {
							n++
						}
					}
					assert.LessOrEqual(t, n, 10)
				}
			})
		})
	}
}

// TestLaneTookOnlyALowerLanesSlot: on a pace of one request per 100ms,
// five backfill requests hold 0, 0 (the burst), 100, 200 and 300ms; an
// interactive request at 50ms takes the slot at 100ms, and each backfill
// request behind it moves one slot later along its own lane. Only the interactive request took a lower
// lane's slot: the moved ones report Bumped, not Took, and the lanes'
// counts agree.
func TestLaneTookOnlyALowerLanesSlot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		var decisions decisionLog
		r := laneRule(2)
		r.Limits = []throttle.Limit{throttle.Paced(10, time.Second, 1)}
		tr := newTransport(t, sent.base(), nil, throttle.WithRule(r), decisions.option())
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() { send(t, tr, testURL) })
			synctest.Wait()
		}
		time.Sleep(50 * time.Millisecond)
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		req.Header.Set("X-Lane", "1")
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		wg.Wait()
		require.Equal(t, 6, sent.count())
		took, bumped := 0, 0
		for _, d := range decisions.all() {
			if d.Took {
				took++
				assert.Equal(t, 1, d.Lane, "only the interactive request took a slot")
			}
			bumped += d.Bumped
		}
		assert.Equal(t, 1, took)
		assert.Equal(t, 3, bumped, "the three backfill requests from 100ms on moved one slot each")
		lanes := tr.Stats().Rules[0].Lanes
		require.Len(t, lanes, 2)
		assert.Equal(t, []uint64{0, 1}, []uint64{lanes[0].Took, lanes[1].Took})
		assert.Equal(t, uint64(3), lanes[0].Bumped)
	})
}

// TestLaneConfig checks the rule's lanes: refused configurations, and a
// lane outside the rule's refused at request time with the body closed.
func TestLaneConfig(t *testing.T) {
	t.Parallel()
	bad := []func(*throttle.Rule){
		func(r *throttle.Rule) { r.Lane = nil },
		func(r *throttle.Rule) { r.Lanes = 1 },
		func(r *throttle.Rule) { r.Lanes = 17 },
		func(r *throttle.Rule) { r.Algorithm = throttle.FixedWindow },
		func(r *throttle.Rule) { r.InFlight = 2 },
	}
	for i, f := range bad {
		r := laneRule(2)
		f(&r)
		_, err := throttle.New(nil, newMemory(t), throttle.WithRule(r))
		assert.True(t, isA[*throttle.ConfigError](err), "case %d: %v", i, err)
	}
	r := laneRule(2)
	r.Lane = func(*http.Request) int { return 2 }
	tr := newTransport(t, roundTripperFunc(func(req *http.Request) (*http.Response, error) { return okResponse(req), nil }), nil, throttle.WithRule(r))
	req, body := newRequest(t, context.Background(), http.MethodGet, testURL)
	_, err := tr.RoundTrip(req)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lane 2 is outside 0..1")
	assert.Equal(t, int32(1), body.closes.Load())
}

// TestLimiterRefusesLanes: a Limiter has no request to read a lane from,
// so a rule with lanes would put every use in lane 0 and pay the confirm
// call for nothing: NewLimiter refuses it.
func TestLimiterRefusesLanes(t *testing.T) {
	t.Parallel()
	r := laneRule(2)
	r.Host, r.Key = "", nil
	for name, rule := range map[string]throttle.Rule{
		"Lanes and Lane": r,
		"Lanes":          func() throttle.Rule { r := r; r.Lane = nil; return r }(),
	} {
		l, err := throttle.NewLimiter(newMemory(t), rule)
		assert.Nil(t, l, name)
		var ce *throttle.ConfigError
		require.ErrorAs(t, err, &ce, name)
		assert.Contains(t, err.Error(), "Lanes", name)
		assert.Contains(t, err.Error(), "a Limiter", name)
	}
}

// TestLanesBumpsStayFew: 24 backfill workers keep a paced 100 per second
// busy while an interactive request every 200ms takes one of their slots,
// for 5s on a fake clock. Each interactive request moves the backfill
// waiters queued behind it one slot later, once: about 24 moves per 20
// requests. Waiters bumped onto one slot used to take it from each other at
// every slot (more than ten moves per request), and the line of moves ran on
// through the requests that queued after the take (3.4 per request).
func TestLanesBumpsStayFew(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := laneRule(2)
		r.Limits, r.Margin, r.NoDefaultPace = []throttle.Limit{throttle.PerSecond(100)}, 0, false
		var mu sync.Mutex
		sent, bumps := 0, 0
		var sl sendLog
		tr := newTransport(t, sl.base(), nil, throttle.WithRule(r), throttle.WithOnDecision(func(d throttle.Decision) {
			mu.Lock()
			defer mu.Unlock()
			if d.Outcome == throttle.Sent {
				sent++
				bumps += d.Bumped
			}
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		send := func(lane string) bool {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/x", nil)
			req.Header.Set("X-Lane", lane)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err == nil
		}
		var wg sync.WaitGroup
		for range 24 {
			wg.Go(func() {
				for send("0") {
				}
			})
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				time.Sleep(200 * time.Millisecond)
				send("1")
			}
		})
		wg.Wait()
		require.Greater(t, sent, 400)
		t.Logf("%d bumps in %d sends", bumps, sent)
		assert.Less(t, float64(bumps)/float64(sent), 1.5, "bumps per request: %d in %d sends", bumps, sent)
	})
}
