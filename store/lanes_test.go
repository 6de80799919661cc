package store_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// laneReq is a request of lane, yielding when yield, on 2 per 100ms.
func laneReq(lane int, yield bool, maxWait time.Duration) contract.Request {
	r := req(1, maxWait, lim(2, 100*time.Millisecond))
	r.Lane, r.Yield = lane, yield
	return r
}

// queueLow reserves n yielding requests of lane 0 on 2 per 100ms: slots 0,
// 0, 100ms, 100ms, 200ms, ...
func queueLow(t *testing.T, s store.Store, key string, n int) []contract.Reservation {
	t.Helper()
	out := make([]contract.Reservation, n)
	for i := range out {
		out[i] = reserve(t, s, key, laneReq(0, true, time.Second))
		require.True(t, out[i].Allowed, "low %d", i)
		require.Equal(t, time.Duration(i/2)*100*time.Millisecond, out[i].Delay, "low %d", i)
		// A slot due now is not worth taking: it does not yield.
		assert.Equal(t, i >= 2, out[i].Yielded != "", "low %d yields", i)
	}
	return out
}

// confirm confirms r at its slot: the same request with r's member.
func confirm(t *testing.T, s store.Store, key string, r contract.Reservation) contract.Reservation {
	t.Helper()
	c := laneReq(0, true, time.Second)
	c.Confirm = r.Yielded
	return reserve(t, s, key, c)
}

// confirmPaced confirms r with the request rq.
func confirmPaced(t *testing.T, s store.Store, key string, rq contract.Request, r contract.Reservation) contract.Reservation {
	t.Helper()
	rq.Confirm = r.Yielded
	return reserve(t, s, key, rq)
}

var laneCases = []conformanceCase{
	{"lanes: a higher lane takes the earliest waiting slot of a lower one", func(t *testing.T, s store.Store, _ *fakeClock, key string) {
		queueLow(t, s, key, 10)
		// Without a lane, behind the whole queue: refused.
		res := reserve(t, s, key, laneReq(0, false, 150*time.Millisecond))
		require.False(t, res.Allowed)
		assert.Equal(t, 500*time.Millisecond, res.RetryAfter)
		res = reserve(t, s, key, laneReq(1, false, 150*time.Millisecond))
		require.True(t, res.Allowed)
		assert.True(t, res.Took)
		assert.Equal(t, 100*time.Millisecond, res.Delay)
		assert.Empty(t, res.Yielded, "the top lane does not yield")
		// The next takes the other slot at 100ms; then 200ms is beyond its wait.
		res = reserve(t, s, key, laneReq(1, false, 150*time.Millisecond))
		require.True(t, res.Allowed)
		assert.Equal(t, 100*time.Millisecond, res.Delay)
		res = reserve(t, s, key, laneReq(1, false, 150*time.Millisecond))
		assert.False(t, res.Allowed, "no lower slot within its wait, and its own is 500ms away")
	}},
	{"lanes: a higher lane takes its own slot when it is earlier", func(t *testing.T, s store.Store, _ *fakeClock, key string) {
		queueLow(t, s, key, 3) // 0, 0, 100ms
		res := reserve(t, s, key, laneReq(1, false, time.Second))
		require.True(t, res.Allowed)
		assert.False(t, res.Took, "its own slot (100ms) is not later than the lower one: a tie leaves the waiter its slot")
		assert.Equal(t, 100*time.Millisecond, res.Delay)
	}},
	{"lanes: each bumped waiter takes the next slot of its lane (FIFO), the last the slot kept for it", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		one := func(lane int, c string) contract.Request {
			r := req(1, time.Second, lim(1, 100*time.Millisecond))
			r.Lane, r.Yield, r.Confirm = lane, lane == 0, c
			return r
		}
		// Lane 0 holds 0, 100, 200 and 300ms; the higher request takes
		// 100ms, and keeps 400ms for the end of the line it moves: a
		// lane-0 request arriving after it queues at 500ms.
		held := make([]contract.Reservation, 5)
		for i := range 4 {
			held[i] = reserve(t, s, key, one(0, ""))
			require.Equal(t, time.Duration(i)*100*time.Millisecond, held[i].Delay)
		}
		high := reserve(t, s, key, one(1, ""))
		require.True(t, high.Took)
		require.Equal(t, 100*time.Millisecond, high.Delay)
		held[4] = reserve(t, s, key, one(0, ""))
		require.Equal(t, 500*time.Millisecond, held[4].Delay)
		// At each slot its waiter finds it taken and takes the next one of
		// its lane, whose waiter does the same at the next slot: each goes
		// one slot later, in the order they came; the last takes the slot
		// kept for it, at 400ms, and the request queued after the take
		// does not move.
		for i := 1; i <= 3; i++ {
			clock.Advance(100 * time.Millisecond)
			c := reserve(t, s, key, one(0, held[i].Yielded))
			require.True(t, c.Allowed, "waiter %d", i)
			require.False(t, c.Confirmed, "waiter %d was bumped", i)
			assert.False(t, c.Took, "waiter %d moves along its own lane: no lower lane's slot", i)
			assert.Equal(t, 100*time.Millisecond, c.Delay, "waiter %d goes one slot later", i)
			held[i] = c
			if i > 1 {
				assert.True(t, reserve(t, s, key, one(0, held[i-1].Yielded)).Confirmed, "waiter %d at its new slot", i-1)
			}
		}
		clock.Advance(100 * time.Millisecond)
		assert.True(t, reserve(t, s, key, one(0, held[3].Yielded)).Confirmed, "waiter 3 at the kept slot")
		clock.Advance(100 * time.Millisecond)
		assert.True(t, reserve(t, s, key, one(0, held[4].Yielded)).Confirmed, "the later request, not moved")
	}},
	{"lanes: two waiters bumped onto one slot go on in their order", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		one := func(lane int, c string) contract.Request {
			r := req(1, time.Second, lim(1, 100*time.Millisecond))
			r.Lane, r.Yield, r.Confirm = lane, lane == 0, c
			return r
		}
		// Lane 0 holds 0, 100, ..., 500ms (w0 to w5). A higher request
		// takes 100ms; w1 moves to 200ms; another higher request takes
		// 200ms from w1 again: at 200ms both w1 and w2 find their slot
		// taken.
		w := make([]contract.Reservation, 6)
		for i := range w {
			w[i] = reserve(t, s, key, one(0, ""))
			require.Equal(t, time.Duration(i)*100*time.Millisecond, w[i].Delay)
		}
		require.Equal(t, 100*time.Millisecond, reserve(t, s, key, one(1, "")).Delay)
		clock.Advance(100 * time.Millisecond)
		w[1] = reserve(t, s, key, one(0, w[1].Yielded))
		require.Equal(t, 100*time.Millisecond, w[1].Delay, "w1 bumped to 200ms")
		clock.Advance(50 * time.Millisecond)
		require.Equal(t, 50*time.Millisecond, reserve(t, s, key, one(1, "")).Delay, "200ms, w1's again")
		clock.Advance(50 * time.Millisecond)
		// w1 first takes 300ms; w2, behind it in line, does not take it
		// back (they would take it from each other at every slot) but
		// goes to 400ms.
		w[1] = reserve(t, s, key, one(0, w[1].Yielded))
		require.False(t, w[1].Confirmed)
		assert.Equal(t, 100*time.Millisecond, w[1].Delay, "w1 at 300ms")
		w[2] = reserve(t, s, key, one(0, w[2].Yielded))
		require.False(t, w[2].Confirmed)
		assert.Equal(t, 200*time.Millisecond, w[2].Delay, "w2 at 400ms, after w1")
		clock.Advance(100 * time.Millisecond)
		assert.True(t, reserve(t, s, key, one(0, w[1].Yielded)).Confirmed, "w1's slot stands")
	}},
	{"lanes: a bumped waiter that moves onto a lower lane's slot took it", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		one := func(lane int, c string) contract.Request {
			r := req(1, time.Second, lim(1, 100*time.Millisecond))
			r.Lane, r.Yield, r.Confirm = lane, lane < 2, c
			return r
		}
		for i := range 4 { // lane 0 holds 0, 100, 200 and 300ms
			require.Equal(t, time.Duration(i)*100*time.Millisecond, reserve(t, s, key, one(0, "")).Delay)
		}
		mid := reserve(t, s, key, one(1, ""))
		require.True(t, mid.Took, "lane 1 takes lane 0's slot at 100ms")
		require.Equal(t, 100*time.Millisecond, mid.Delay)
		require.NotEmpty(t, mid.Yielded, "and yields it to lane 2")
		top := reserve(t, s, key, one(2, ""))
		require.True(t, top.Took, "lane 2 takes it from lane 1")
		require.Equal(t, 100*time.Millisecond, top.Delay)
		clock.Advance(100 * time.Millisecond)
		c := reserve(t, s, key, one(1, mid.Yielded))
		require.True(t, c.Allowed)
		require.False(t, c.Confirmed)
		assert.Equal(t, 100*time.Millisecond, c.Delay, "lane 0's slot at 200ms")
		assert.True(t, c.Took, "a lower lane's slot")
	}},
	{"lanes: a bumped waiter's cancel leaves the entry of the slot it lost", func(t *testing.T, s store.Store, _ *fakeClock, key string) {
		one := func(lane int, yield bool) contract.Request {
			r := req(1, time.Second, lim(1, 100*time.Millisecond))
			r.Lane, r.Yield = lane, yield
			return r
		}
		reserve(t, s, key, one(0, true)) // 0
		a := reserve(t, s, key, one(0, true))
		require.Equal(t, 100*time.Millisecond, a.Delay)
		b := reserve(t, s, key, one(0, true))
		require.Equal(t, 200*time.Millisecond, b.Delay)
		h := reserve(t, s, key, one(1, false))
		require.True(t, h.Took)
		require.Equal(t, 100*time.Millisecond, h.Delay)
		require.NoError(t, s.Cancel(ctx, a))
		// The entry at 100ms is the higher request's: still counted; and
		// 300ms was kept for the end of the line a was in (a gave up its
		// place in it: that slot goes unsent).
		n := reserve(t, s, key, one(0, false))
		assert.Equal(t, 400*time.Millisecond, n.Delay)
		// A waiter not bumped gives its slot back: no higher lane finds it.
		require.NoError(t, s.Cancel(ctx, b))
		h2 := reserve(t, s, key, one(1, false))
		assert.False(t, h2.Took)
	}},
	{"lanes: a confirmed slot is never taken", func(t *testing.T, s store.Store, _ *fakeClock, key string) {
		low := queueLow(t, s, key, 4)
		assert.True(t, confirm(t, s, key, low[2]).Confirmed)
		assert.True(t, confirm(t, s, key, low[3]).Confirmed)
		res := reserve(t, s, key, laneReq(1, false, time.Second))
		require.True(t, res.Allowed)
		assert.False(t, res.Took)
		assert.Equal(t, 200*time.Millisecond, res.Delay)
	}},
	{"lanes: a pause holds a higher lane too", func(t *testing.T, s store.Store, _ *fakeClock, key string) {
		queueLow(t, s, key, 6)
		require.NoError(t, s.Pause(ctx, key, 250*time.Millisecond))
		res := reserve(t, s, key, laneReq(1, false, time.Second))
		require.True(t, res.Allowed)
		assert.False(t, res.Took, "no slot before the pause's end is taken")
		assert.Equal(t, 300*time.Millisecond, res.Delay, "its own slot")
	}},
	{"lanes: a paced limit: the slot taken keeps the spacing", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		paced := func(lane int) contract.Request {
			r := req(1, time.Second, contract.Limit{N: 10, Per: time.Second, Paced: true}, lim(100, time.Second))
			r.Lane, r.Yield = lane, lane == 0
			return r
		}
		var low []contract.Reservation
		for i := range 4 {
			low = append(low, reserve(t, s, key, paced(0)))
			require.Equal(t, time.Duration(i)*100*time.Millisecond, low[i].Delay)
		}
		h := reserve(t, s, key, paced(1))
		require.True(t, h.Took)
		require.Equal(t, 100*time.Millisecond, h.Delay)
		// The bumped waiter takes 200ms, and so on; the last a new slot,
		// spaced after the last one reserved: 400ms.
		for i := 1; i < 4; i++ {
			clock.Advance(100 * time.Millisecond)
			c := confirmPaced(t, s, key, paced(0), low[i])
			require.True(t, c.Allowed)
			assert.Equal(t, 100*time.Millisecond, c.Delay, "waiter %d", i)
			low[i] = c
		}
		clock.Advance(100 * time.Millisecond)
		assert.True(t, confirmPaced(t, s, key, paced(0), low[3]).Confirmed)
	}},
	{"lanes: a higher lane with a larger allowance still takes a lower slot", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		// The backfill process measured 1ms of lateness; the interactive
		// one has not measured its own yet and asks with 3ms. A yielding
		// slot is recorded with contract.LaneAllowance at least, so the
		// interactive request fits in it; a later one takes it too, and is
		// held to the slot's allowance.
		with := func(r contract.Request, a time.Duration) contract.Request { r.Allowance = a; return r }
		var low []contract.Reservation
		for range 6 {
			low = append(low, reserve(t, s, key, with(laneReq(0, true, time.Second), time.Millisecond)))
		}
		require.Greater(t, low[5].Delay, low[2].Delay)
		assert.Equal(t, contract.LaneAllowance.Microseconds(), low[2].Entry-low[2].Slot, "recorded at its slot plus the lanes' allowance")
		res := reserve(t, s, key, with(laneReq(1, false, time.Second), 3*time.Millisecond))
		require.True(t, res.Allowed)
		assert.True(t, res.Took)
		assert.Equal(t, low[2].Delay, res.Delay, "the first yielding slot")
		// A taker later than the lanes' allowance takes the next one too,
		// and sends within the slot's allowance, its entry less its slot.
		res = reserve(t, s, key, with(laneReq(1, false, time.Second), contract.LaneAllowance+time.Millisecond))
		require.True(t, res.Allowed)
		assert.True(t, res.Took)
		assert.Equal(t, low[3].Delay, res.Delay, "the next yielding slot")
		assert.Equal(t, contract.LaneAllowance.Microseconds(), res.Entry-res.Slot)
		// A slot that does not yield keeps its own allowance.
		res = reserve(t, s, key+"-plain", with(laneReq(0, false, time.Second), time.Millisecond))
		assert.Equal(t, time.Millisecond.Microseconds(), res.Entry-res.Slot)
		// Its waiter finds it taken when it confirms, with its own
		// allowance; its successor, whose slot it takes, finds it taken too.
		clock.Advance(low[2].Delay)
		c := confirmPaced(t, s, key, with(laneReq(0, true, time.Second), time.Millisecond), low[2])
		require.True(t, c.Allowed)
		assert.False(t, c.Confirmed, "its slot was taken")
		assert.False(t, c.Took, "it takes the next of its lane, no lower lane's")
		assert.Equal(t, low[4].Slot, c.Slot, "low[3]'s, at the same time, is due")
		clock.Advance(low[5].Delay - low[2].Delay)
		c = confirmPaced(t, s, key, with(laneReq(0, true, time.Second), time.Millisecond), low[5])
		assert.True(t, c.Confirmed, "its slot stands")
	}},
	{"lanes: a bumped waiter later than the next slot's allowance goes to the end", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		// Taking the next waiter's slot would move every waiter behind it
		// once more; a waiter whose allowance the next slot does not cover
		// takes a slot at the end of the queue instead.
		with := func(r contract.Request, a time.Duration) contract.Request { r.Allowance = a; return r }
		var low []contract.Reservation
		for range 6 {
			low = append(low, reserve(t, s, key, with(laneReq(0, true, time.Second), time.Millisecond)))
		}
		res := reserve(t, s, key, with(laneReq(1, false, time.Second), time.Millisecond))
		require.True(t, res.Took)
		require.Equal(t, low[2].Slot, res.Slot)
		clock.Advance(low[2].Delay)
		c := confirmPaced(t, s, key, with(laneReq(0, true, time.Second), contract.LaneAllowance+time.Millisecond), low[2])
		require.True(t, c.Allowed)
		assert.False(t, c.Confirmed, "its slot was taken")
		assert.Greater(t, c.Slot, low[5].Slot, "a slot at the end, no other waiter's")
	}},
	{"lanes: bad lanes are refused", func(t *testing.T, s store.Store, _ *fakeClock, key string) {
		for _, r := range []contract.Request{
			laneReq(contract.MaxLane+1, false, 0),
			laneReq(-1, false, 0),
			{Limits: []contract.Limit{lim(2, time.Second)}, Cost: 1, Lane: 1, Algorithm: contract.FixedWindow},
			{Limits: []contract.Limit{lim(2, time.Second)}, Cost: 1, Lane: 1, Also: []contract.Part{{Key: key + "-app", Limits: []contract.Limit{lim(2, time.Second)}}}},
			{Limits: []contract.Limit{lim(2, time.Second)}, Cost: 1, Confirm: "x"},
		} {
			_, err := s.Reserve(ctx, key, r)
			assert.ErrorIs(t, err, contract.ErrInvalidRequest, "%+v", r)
		}
	}},
}

// TestLanes runs the lanes' cases on every store.
func TestLanes(t *testing.T) { runCases(t, laneCases) }

// TestLanesProperty reserves from 12 workers of three lanes at once, each
// holding some yielding reservations unconfirmed for a while, so that
// higher lanes take their slots, and confirming them in random order,
// retaking when bumped. Every reservation that ends confirmed, or that a
// higher lane holds, sends once at its slot: no window may hold more than
// N. (Leaving out the bumped set, so that a bumped waiter's confirm says
// its slot stands, fails it: two sends on one entry.)
func TestLanesProperty(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for seed := range uint64(2) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					runLanesProperty(t, im, seed)
				})
			}
		})
	}
}

func runLanesProperty(t *testing.T, im impl, seed uint64) {
	limits := []contract.Limit{lim(4, 40*time.Millisecond)}
	clock := newFakeClock()
	var s store.Store
	if im.name == "memory" {
		s = im.open(t, clock.Now)
	} else {
		s = im.open(t, nil)
	}
	key := uniqueKey(t)
	var mu sync.Mutex
	var log []sent
	var took int
	send := func(r contract.Reservation) {
		mu.Lock()
		defer mu.Unlock()
		log = append(log, sent{r.Slot, int(r.Cost)})
		if r.Took {
			took++
		}
	}
	// The workers go in rounds, all twelve in each, so that every lane
	// reserves among the others however the goroutines are scheduled.
	const workers, rounds = 12, 40
	type worker struct {
		r    *rand.Rand
		lane int
		held []contract.Reservation
	}
	ws := make([]*worker, workers)
	for w := range ws {
		ws[w] = &worker{r: rand.New(rand.NewPCG(seed, uint64(w))), lane: w % 3}
	}
	mk := func(wk *worker) contract.Request {
		rq := req(1, time.Duration(50+wk.r.IntN(2000))*time.Millisecond, limits...)
		rq.Lane, rq.Yield = wk.lane, wk.lane < 2
		return rq
	}
	// settle confirms h, retaking while bumped, and sends on what stands.
	settle := func(wk *worker, h contract.Reservation) {
		for h.Yielded != "" {
			rq := mk(wk)
			rq.MaxWait = 10 * time.Second
			rq.Confirm = h.Yielded
			c, err := s.Reserve(ctx, key, rq)
			if !assert.NoError(t, err) {
				return
			}
			if c.Confirmed {
				break
			}
			if !c.Allowed {
				return // bumped, and no slot within its wait
			}
			h = c
		}
		send(h)
	}
	step := func(wk *worker, last bool) {
		r := wk.r
		res, err := s.Reserve(ctx, key, mk(wk))
		if !assert.NoError(t, err) || !res.Allowed {
			return
		}
		switch {
		case r.IntN(6) == 0:
			assert.NoError(t, s.Cancel(ctx, res))
		case res.Yielded == "":
			send(res)
		default:
			wk.held = append(wk.held, res)
		}
		for len(wk.held) > 3 || last && len(wk.held) > 0 {
			i := r.IntN(len(wk.held))
			settle(wk, wk.held[i])
			wk.held = append(wk.held[:i], wk.held[i+1:]...)
		}
	}
	stop := clock.moving(seed, 5_000*time.Microsecond, 50*time.Microsecond)
	for round := range rounds {
		var wg sync.WaitGroup
		for _, wk := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				step(wk, round == rounds-1)
			}()
		}
		wg.Wait()
	}
	stop()
	require.NotEmpty(t, log)
	n, at := maxInWindow(log, limits[0].Per)
	require.LessOrEqual(t, n, limits[0].N, "units in the window ending at %d", at)
	t.Logf("%d sends, %d on a taken slot", len(log), took)
	assert.Positive(t, took, "no slot was taken: the test proves nothing")
	assert.Equal(t, limits[0].N, n, "the load never filled a window; the test proves nothing")
}
