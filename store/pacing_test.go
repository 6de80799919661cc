package store_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/memstore"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

func paced(n int, per time.Duration, burst int) contract.Limit {
	return contract.Limit{N: n, Per: per, Paced: true, Burst: burst}
}

// TestPacingCases checks a paced limit's exact slots on every store, alone
// and beside window limits.
func TestPacingCases(t *testing.T) { runCases(t, pacingCases) }

// delays reserves r n times and returns the delays, failing on a refusal.
func delays(t *testing.T, s store.Store, key string, r contract.Request, n int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for range n {
		res := reserve(t, s, key, r)
		require.True(t, res.Allowed, "refused, RetryAfter %s", res.RetryAfter)
		out = append(out, res.Delay)
	}
	return out
}

const ms = time.Millisecond

var pacingCases = []conformanceCase{
	{"paced: one every Per/N, the binding limit named", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, paced(4, time.Second, 0))
		assert.Equal(t, []time.Duration{0, 250 * ms, 500 * ms, 750 * ms}, delays(t, s, key, r, 4))
		expect(t, s, key, req(1, 999*ms, paced(4, time.Second, 0)), time.Second, "a slot beyond MaxWait is refused")
		expect(t, s, key, r, allowed{time.Second, contract.CauseLimit, 0}, "and granted within it")
	}},
	{"paced: a burst goes at once, then the spacing", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, paced(10, time.Second, 2))
		assert.Equal(t, []time.Duration{0, 0, 0, 100 * ms, 200 * ms}, delays(t, s, key, r, 5))
		clock.Advance(time.Second)
		// TAT was 500ms: 500ms idle gives back the whole burst.
		assert.Equal(t, []time.Duration{0, 0, 0, 100 * ms}, delays(t, s, key, r, 4))
	}},
	{"paced: a cost takes cost spacings, and at most the burst plus one", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		expect(t, s, key, req(3, time.Hour, paced(10, time.Second, 2)), allowed{0, contract.CauseNone, 0}, "3 at once")
		expect(t, s, key, req(2, time.Hour, paced(10, time.Second, 2)), allowed{200 * ms, contract.CauseLimit, 0}, "TAT 300ms: 2 more from 200ms")
		_, err := s.Reserve(ctx, key, req(4, time.Hour, paced(10, time.Second, 2)))
		assert.ErrorIs(t, err, contract.ErrInvalidRequest, "cost above burst + 1")
	}},
	{"paced: a refusal records nothing", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, paced(10, time.Second, 0))
		expect(t, s, key, r, allowed{0, contract.CauseNone, 0}, "first")
		for range 5 {
			expect(t, s, key, r, 100*ms, "refused")
		}
		clock.Advance(100 * ms)
		expect(t, s, key, r, allowed{0, contract.CauseNone, 0}, "due")
	}},
	{"paced beside a window limit: the later of both, recorded in both", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		limits := []contract.Limit{lim(3, time.Second), paced(10, time.Second, 0)}
		r := contract.Request{Limits: limits, Cost: 1, MaxWait: time.Hour}
		expect(t, s, key, r, allowed{0, contract.CauseNone, 0}, "first")
		expect(t, s, key, r, allowed{100 * ms, contract.CauseLimit, 1}, "the pace")
		expect(t, s, key, r, allowed{200 * ms, contract.CauseLimit, 1}, "the pace")
		expect(t, s, key, r, allowed{time.Second, contract.CauseLimit, 0}, "the window: 3 in a second")
		expect(t, s, key, r, allowed{1100 * ms, contract.CauseLimit, 1}, "a tie: the pace is named (checked first)")
		// The window order of the request does not matter to the indexes.
		r2 := contract.Request{Limits: []contract.Limit{paced(10, time.Second, 0), lim(3, time.Second)}, Cost: 1, MaxWait: time.Hour}
		expect(t, s, key+"b", r2, allowed{0, contract.CauseNone, 0}, "first")
		expect(t, s, key+"b", r2, allowed{100 * ms, contract.CauseLimit, 0}, "the pace")
		expect(t, s, key+"b", r2, allowed{200 * ms, contract.CauseLimit, 0}, "the pace")
		expect(t, s, key+"b", r2, allowed{time.Second, contract.CauseLimit, 1}, "the window")
	}},
	{"paced with two window limits: each named by its index", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := contract.Request{Limits: []contract.Limit{lim(2, 50*ms), paced(100, time.Second, 5), lim(4, time.Second)}, Cost: 1, MaxWait: time.Hour}
		got := []allowed{}
		for range 6 {
			res := reserve(t, s, key, r)
			require.True(t, res.Allowed)
			got = append(got, allowed{res.Delay, res.Cause, res.Limit})
		}
		// The burst of 5 at 100/s never binds here: the windows do.
		assert.Equal(t, []allowed{{0, contract.CauseNone, 0}, {0, contract.CauseNone, 0}, {50 * ms, contract.CauseLimit, 0},
			{50 * ms, contract.CauseLimit, 0}, {time.Second, contract.CauseLimit, 2}, {time.Second, contract.CauseLimit, 2}}, got)
	}},
	{"paced: the allowance counts from the latest send", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, paced(10, time.Second, 0))
		r.Allowance = 30 * ms
		assert.Equal(t, []time.Duration{0, 130 * ms, 260 * ms}, delays(t, s, key, r, 3), "burst 0: every slot pays the allowance")
		r = req(1, time.Hour, paced(10, time.Second, 1))
		r.Allowance = 30 * ms
		assert.Equal(t, []time.Duration{0, 30 * ms, 130 * ms, 230 * ms}, delays(t, s, key+"b", r, 4), "a burst absorbs it")
	}},
	{"paced: cancel gives the time back while no later reservation took it", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, paced(10, time.Second, 0))
		reserve(t, s, key, r)
		b := reserve(t, s, key, r)
		require.Equal(t, 100*ms, b.Delay)
		require.NoError(t, s.Cancel(ctx, b))
		require.NoError(t, s.Cancel(ctx, b), "a second cancel changes nothing")
		c := reserve(t, s, key, r)
		assert.Equal(t, 100*ms, c.Delay, "given back")
		d := reserve(t, s, key, r)
		assert.Equal(t, 200*ms, d.Delay)
		require.NoError(t, s.Cancel(ctx, c))
		assert.Equal(t, 300*ms, reserve(t, s, key, r).Delay, "c's time stays spent: d was placed after it")
	}},
	{"paced beside a window: cancel gives back both", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := contract.Request{Limits: []contract.Limit{lim(2, time.Second), paced(10, time.Second, 0)}, Cost: 1, MaxWait: time.Hour}
		reserve(t, s, key, r)
		b := reserve(t, s, key, r)
		require.Equal(t, 100*ms, b.Delay)
		require.NoError(t, s.Cancel(ctx, b))
		assert.Equal(t, 100*ms, reserve(t, s, key, r).Delay)
		assert.Equal(t, time.Second, reserve(t, s, key, r).Delay, "the log holds two")
	}},
	{"paced: an idle key starts afresh", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(2, time.Hour, paced(2, time.Second, 1))
		reserve(t, s, key, r)
		assert.Equal(t, time.Second, reserve(t, s, key, r).Delay)
		clock.Advance(5 * time.Second)
		assert.Equal(t, time.Duration(0), reserve(t, s, key, r).Delay)
	}},
	{"paced: a pause holds it, as every limit", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		require.NoError(t, s.(contract.Feedback).Pause(ctx, key, 300*ms))
		r := req(1, time.Hour, paced(10, time.Second, 0))
		expect(t, s, key, r, allowed{300 * ms, contract.CauseUpstream, 0}, "paused")
		expect(t, s, key, r, allowed{400 * ms, contract.CauseLimit, 0}, "then spaced")
	}},
	{"paced, slow start: a new key goes evenly spaced, earns its burst idling, and starts again after a window", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := paced(10, time.Second, 2)
		l.SlowStart = true
		r := req(1, time.Hour, l)
		assert.Equal(t, []time.Duration{0, 100 * ms, 200 * ms}, delays(t, s, key, r, 3), "no burst to start with")
		clock.Advance(500 * ms) // at the TAT: the whole burst earned
		assert.Equal(t, []time.Duration{0, 0, 0, 100 * ms}, delays(t, s, key, r, 4))
		clock.Advance(1300 * ms) // 900ms past the TAT, within a window of it: the burst is kept
		assert.Equal(t, []time.Duration{0, 0, 0, 100 * ms}, delays(t, s, key, r, 4))
		clock.Advance(2100 * ms) // a window (1s) past the TAT: a new start
		assert.Equal(t, []time.Duration{0, 100 * ms, 200 * ms}, delays(t, s, key, r, 3))
		l.SlowStart = false
		assert.Equal(t, []time.Duration{0, 0, 0, 100 * ms}, delays(t, s, key+"b", req(1, time.Hour, l), 4), "without it, the burst at once")
	}},
	{"paced, slow start: what a pause held back goes evenly spaced from its end", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := paced(10, time.Second, 2)
		l.SlowStart = true
		r := req(1, time.Hour, l)
		clock.Advance(3 * time.Second)
		require.NoError(t, s.(contract.Feedback).Pause(ctx, key, 300*ms))
		expect(t, s, key, r, allowed{300 * ms, contract.CauseUpstream, 0}, "held to the pause's end")
		expect(t, s, key, r, allowed{400 * ms, contract.CauseLimit, 0}, "then one spacing later")
		expect(t, s, key, r, allowed{500 * ms, contract.CauseLimit, 0}, "and the next")
		l.SlowStart = false
		r = req(1, time.Hour, l)
		require.NoError(t, s.(contract.Feedback).Pause(ctx, key+"b", 300*ms))
		assert.Equal(t, []time.Duration{300 * ms, 300 * ms, 300 * ms, 400 * ms}, delays(t, s, key+"b", r, 4), "without it, the burst at the end")
	}},
	{"paced, slow start beside a learned pace: the smaller burst, earned", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := paced(10, time.Second, 3)
		l.SlowStart = true
		require.NoError(t, s.(contract.Feedback).Learn(ctx, key, contract.Learned{Pace: paced(10, time.Second, 1), PaceTTL: time.Minute}))
		assert.Equal(t, []time.Duration{0, 100 * ms, 200 * ms}, delays(t, s, key, req(1, time.Hour, l), 3))
		clock.Advance(time.Second)
		assert.Equal(t, []time.Duration{0, 0, 100 * ms}, delays(t, s, key, req(1, time.Hour, l), 3), "the learned burst of 1, earned")
	}},
	{"paced: a reservation says when the key last moved to a stricter learned pace", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		fb := s.(contract.Feedback)
		r := req(1, time.Hour, lim(1000, time.Second))
		assert.Zero(t, reserve(t, s, key, r).Reshaped(), "no learned pace")
		require.NoError(t, fb.Learn(ctx, key, contract.Learned{Pace: paced(10, time.Second, 2), PaceTTL: time.Minute}))
		first := reserve(t, s, key, r)
		require.True(t, first.Allowed)
		moved := first.Reshaped()
		assert.Equal(t, first.Decided(), moved, "moved when learned (the clock did not advance)")
		clock.Advance(50 * ms)
		require.NoError(t, fb.Learn(ctx, key, contract.Learned{Pace: paced(10, 2*time.Second, 2), PaceTTL: time.Minute}))
		assert.Equal(t, moved, reserve(t, s, key, r).Reshaped(), "slowed: not a move")
		clock.Advance(50 * ms)
		require.NoError(t, fb.Learn(ctx, key, contract.Learned{Pace: paced(10, time.Second, 0), PaceTTL: time.Minute}))
		res := reserve(t, s, key, r)
		assert.Equal(t, moved+100_000, res.Reshaped(), "a smaller burst is a move")
		clock.Advance(2 * time.Minute)
		assert.Zero(t, reserve(t, s, key, r).Reshaped(), "the pace expired")
	}},
	{"paced: invalid requests", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		for name, r := range map[string]contract.Request{
			"paced under fixed":      algReq(contract.FixedWindow, 1, 0, paced(10, time.Second, 0)),
			"paced under buckets":    algReq(contract.Buckets, 1, 0, paced(10, time.Second, 0)),
			"two paced":              req(1, 0, paced(10, time.Second, 0), paced(100, time.Minute, 0)),
			"burst above N":          req(1, 0, paced(10, time.Second, 11)),
			"negative burst":         req(1, 0, paced(10, time.Second, -1)),
			"cost above burst+1":     req(2, 0, paced(10, time.Second, 0)),
			"burst on a window":      req(1, 0, contract.Limit{N: 10, Per: time.Second, Burst: 2}),
			"precision on paced":     req(1, 0, contract.Limit{N: 10, Per: time.Second, Paced: true, Precision: ms}),
			"slow start on a window": req(1, 0, contract.Limit{N: 10, Per: time.Second, SlowStart: true}),
		} {
			_, err := s.Reserve(ctx, key, r)
			assert.ErrorIs(t, err, contract.ErrInvalidRequest, name)
		}
	}},
}

// randomPaced draws a paced limit and 0-2 window limits, in random order.
func randomPaced(rng *rand.Rand) []contract.Limit {
	n := 3 + rng.IntN(40)
	limits := []contract.Limit{paced(n, time.Duration(10+rng.IntN(1000))*ms, rng.IntN(min(n, 6)))}
	limits[0].SlowStart = rng.IntN(2) == 0
	for range rng.IntN(3) {
		limits = append(limits, lim(3+rng.IntN(18), time.Duration(10+rng.IntN(2000))*ms))
	}
	rng.Shuffle(len(limits), func(i, j int) { limits[i], limits[j] = limits[j], limits[i] })
	return limits
}

// maxCost is the largest cost every limit admits.
func maxCost(limits []contract.Limit) int {
	c := 1 << 30
	for _, l := range limits {
		c = min(c, l.N)
		if l.Paced {
			c = min(c, l.Burst+1)
		}
	}
	return c
}

// TestPacingDifferential drives every store with the same random sequence of
// paced reservations (with window limits, allowances, feedback, cancels and
// clock steps) and requires the same answers: memory.go and the scripts agree.
func TestPacingDifferential(t *testing.T) {
	ims := impls(t)
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 14))
			limits := randomPaced(rng)
			clock := newFakeClock()
			clock.Advance(time.Duration(rng.IntN(1_000_000)) * time.Microsecond)
			stores := make([]store.Store, len(ims))
			for i, im := range ims {
				stores[i] = im.open(t, clock.Now)
			}
			key := uniqueKey(t)
			var held [][]contract.Reservation
			refusals, byPace := 0, 0
			last := time.Now()
			for op := range 400 {
				if rng.IntN(24) == 0 {
					var l contract.Learned
					switch rng.IntN(4) {
					case 0:
						l.Pause = time.Duration(rng.IntN(300)) * ms
					case 3:
						l.Pace = paced(2+rng.IntN(30), time.Duration(10+rng.IntN(1000))*ms, rng.IntN(3))
						l.PaceTTL = time.Duration(100+rng.IntN(1000)) * ms
					case 1:
						l.Limit = lim(2+rng.IntN(8), time.Duration(10+rng.IntN(1000))*ms)
						l.LimitTTL = time.Duration(500+rng.IntN(2500)) * ms
					default:
						l.Remaining = rng.IntN(6)
						l.Reset = time.Duration(rng.IntN(2000)) * ms
					}
					for _, s := range stores {
						require.NoError(t, s.(contract.Feedback).Learn(ctx, key, l))
					}
					continue
				}
				if len(held) > 0 && rng.IntN(6) == 0 {
					i := rng.IntN(len(held))
					if rng.IntN(2) == 0 {
						i = len(held) - 1 // the last: its time comes back
					}
					for j, s := range stores {
						require.NoError(t, s.Cancel(ctx, held[i][j]))
					}
					held = append(held[:i], held[i+1:]...)
					continue
				}
				r := contract.Request{Limits: limits, Cost: 1 + rng.IntN(maxCost(limits)), MaxWait: time.Duration(rng.IntN(3000)) * ms}
				if rng.IntN(3) == 0 {
					r.Allowance = time.Duration(rng.IntN(30_000)) * time.Microsecond
				}
				var got []contract.Reservation
				for _, s := range stores {
					got = append(got, reserve(t, s, key, r))
				}
				for j := 1; j < len(got); j++ {
					a, b := got[0], got[j]
					require.Equal(t,
						[]any{a.Allowed, a.Delay, a.RetryAfter, a.Slot, a.Entry, a.Limit, a.Cause, a.Reshaped()},
						[]any{b.Allowed, b.Delay, b.RetryAfter, b.Slot, b.Entry, b.Limit, b.Cause, b.Reshaped()},
						"op %d, %s vs %s, limits %v", op, ims[0].name, ims[j].name, limits)
				}
				if got[0].Allowed {
					held = append(held, got)
				} else {
					refusals++
				}
				if got[0].Cause == contract.CauseLimit && limits[got[0].Limit].Paced {
					byPace++
				}
				clock.Advance(time.Duration(rng.IntN(10_000))*time.Microsecond + 2*time.Since(last))
				last = time.Now()
			}
			t.Logf("limits %v: %d refusals, %d slots set by the pace", limits, refusals, byPace)
			assert.Positive(t, refusals, "the sequence never filled a limit; it proves little")
			assert.Positive(t, byPace, "the pace never set a slot; it proves little")
		})
	}
}

// TestPacingProperty is the paced guarantee under concurrent load on every
// store: workers with random costs and allowances send anywhere within their
// allowance after their slots, some cancel, and a GCRA of the limit's spacing
// and burst (the strictest upstream of that rate) accepts every send; the
// window limits beside it are never overfilled.
func TestPacingProperty(t *testing.T) {
	allowances := []time.Duration{0, 0, 0, 0, ms, ms, 3 * ms, 3 * ms, 20 * ms, 0, 0, 0}
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for seed := range uint64(4) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, 15))
					limits := []contract.Limit{paced(5+rng.IntN(40), time.Duration(50+rng.IntN(500))*ms, int(seed%3)*(1+rng.IntN(3)))}
					if seed%2 == 1 {
						limits = append(limits, lim(limits[0].N/2+rng.IntN(5), time.Duration(200+rng.IntN(1000))*ms))
					}
					runPacingProperty(t, im, seed, limits, allowances)
				})
			}
		})
	}
}

func runPacingProperty(t *testing.T, im impl, seed uint64, limits []contract.Limit, allowances []time.Duration) {
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
	var byPace atomic.Int64
	var wg sync.WaitGroup
	for w := range allowances {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range 30 {
				rq := contract.Request{Limits: limits, Cost: 1 + r.IntN(maxCost(limits)), MaxWait: time.Duration(r.IntN(3000)) * ms, Allowance: allowances[w]}
				res, err := s.Reserve(ctx, key, rq)
				if !assert.NoError(t, err) {
					return
				}
				if !res.Allowed {
					continue
				}
				if res.Cause == contract.CauseLimit && limits[res.Limit].Paced {
					byPace.Add(1)
				}
				if r.IntN(5) == 0 {
					assert.NoError(t, s.Cancel(ctx, res))
					continue
				}
				at := res.Slot + r.Int64N(rq.Allowance.Microseconds()+1)
				mu.Lock()
				log = append(log, sent{at, rq.Cost})
				mu.Unlock()
			}
		})
	}
	// The clock moves while the workers reserve.
	stop := clock.moving(seed, 20_000*time.Microsecond, 50*time.Microsecond)
	wg.Wait()
	stop()
	require.NotEmpty(t, log)
	p := limits[0]
	spacing := (p.Per.Microseconds() + int64(p.N) - 1) / int64(p.N)
	if at, ok := gcraAccepts(log, spacing, p.Burst); !ok {
		t.Fatalf("limit %s: a GCRA of spacing %dµs and burst %d refuses the send at %d", p, spacing, p.Burst, at)
	}
	for _, l := range limits[1:] {
		if n, at := maxInWindow(log, l.Per); n > l.N {
			t.Fatalf("limit %s: %d units in the window ending at %d", l, n, at)
		}
	}
	// The check has teeth: the pace set slots, and a GCRA spaced 1% more
	// tightly than the limit refuses what was sent when every worker sends
	// at its slot (TestPacingPropertyTeeth).
	t.Logf("limits %v: %d sends, %d slots set by the pace", limits, len(log), byPace.Load())
	assert.Positive(t, byPace.Load(), "the pace never set a slot; the test proves nothing")
}

// gcraAccepts runs a GCRA of spacing T µs and burst B over the sends, in time
// order (a cost is that many units at once), and returns whether it accepts
// them all, or the time of the first it refuses.
func gcraAccepts(log []sent, T int64, B int) (int64, bool) {
	log = slices.Clone(log)
	slices.SortFunc(log, func(a, b sent) int { return int(a.slot - b.slot) })
	tat := int64(-1 << 62)
	for _, e := range log {
		next := max(tat, e.slot) + int64(e.cost)*T
		if next-e.slot > int64(B+1)*T {
			return e.slot, false
		}
		tat = next
	}
	return 0, true
}

func TestGCRAAccepts(t *testing.T) {
	_, ok := gcraAccepts([]sent{{0, 1}, {10, 1}, {20, 1}}, 10, 0)
	assert.True(t, ok)
	at, ok := gcraAccepts([]sent{{0, 1}, {10, 1}, {19, 1}}, 10, 0)
	assert.False(t, ok)
	assert.Equal(t, int64(19), at)
	_, ok = gcraAccepts([]sent{{0, 3}, {10, 1}}, 10, 2)
	assert.True(t, ok)
	_, ok = gcraAccepts([]sent{{0, 3}, {9, 1}}, 10, 2)
	assert.False(t, ok)
}

// TestPacingPropertyTeeth: with every worker sending at its slot and no
// allowance, the memory store's schedule is refused by a GCRA spaced 1%
// tighter (the load uses the whole rate), and accepted by the limit's own.
func TestPacingPropertyTeeth(t *testing.T) {
	clock := newFakeClock()
	m, err := memstore.NewMemory(memstore.WithClock(clock.Now))
	require.NoError(t, err)
	l := paced(50, time.Second, 3)
	var log []sent
	for i := range 300 {
		res := reserve(t, m, "k", req(1+i%3, time.Hour, l))
		log = append(log, sent{res.Slot, 1 + i%3})
		clock.Advance(time.Millisecond)
	}
	_, ok := gcraAccepts(log, 20_000, 3)
	assert.True(t, ok)
	_, ok = gcraAccepts(log, 20_200, 3)
	assert.False(t, ok, "the schedule uses the whole rate")
}

// TestRedisPacedCommands counts, with MONITOR, the commands of a common paced
// reservation: beside a window limit, the log's four (TIME, LINDEX of the
// last entry, LINDEX of the entry that decides, RPUSH) and the pace's two
// (GET, SET with PX); a paced limit alone keeps no log, and reads the
// feedback hash instead of the log's mark (TIME, GET, HMGET, SET).
func TestRedisPacedCommands(t *testing.T) {
	srv, err := redistest.StartServer()
	if err != nil {
		t.Skipf("needs redis-server: %v", err)
	}
	t.Cleanup(srv.Close)
	s, err := redisstore.NewRedis(srv.Client(t))
	require.NoError(t, err)
	for _, c := range []struct {
		name   string
		limits []contract.Limit
		learn  contract.Learned
		want   []string
	}{
		{"with a window", []contract.Limit{lim(100, time.Hour), paced(1000, time.Second, 100)}, contract.Learned{}, []string{"TIME", "LINDEX", "GET", "LINDEX", "SET", "RPUSH"}},
		{"alone", []contract.Limit{paced(1000, time.Second, 100)}, contract.Learned{}, []string{"TIME", "GET", "HMGET", "SET"}},
		// The log's common call is unchanged by the pace key it is given.
		{"a window, no pace", []contract.Limit{lim(100, time.Hour)}, contract.Learned{}, []string{"TIME", "LINDEX", "LINDEX", "RPUSH"}},
		// A learned pace costs the feedback read (the mark) and the pace's two.
		{"a window, a learned pace", []contract.Limit{lim(100, time.Hour)}, contract.Learned{Pace: paced(1000, time.Second, 0), PaceTTL: time.Minute},
			[]string{"TIME", "LINDEX", "LINDEX", "HMGET", "GET", "SET", "RPUSH"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := uniqueKey(t)
			if c.learn.Pace.N > 0 {
				require.NoError(t, s.Learn(ctx, key, c.learn))
			}
			r := contract.Request{Limits: c.limits, Cost: 1, MaxWait: time.Second}
			reserve(t, s, key, r)
			reserve(t, s, key, r)
			m := startMonitor(t, srv.Addr)
			require.True(t, reserve(t, s, key, r).Allowed)
			var cmds []string
			for _, l := range m.until(t, "redistest-monitor-end") {
				if cmd, _, fromScript := parseMonitor(l); fromScript {
					cmds = append(cmds, cmd)
				}
			}
			assert.Equal(t, c.want, cmds)
		})
	}
}
