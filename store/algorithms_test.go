package store_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/memstore"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

var countingAlgorithms = []contract.Algorithm{contract.FixedWindow, contract.SlidingCounter, contract.Buckets}

func algReq(alg contract.Algorithm, cost int, maxWait time.Duration, limits ...contract.Limit) contract.Request {
	return contract.Request{Limits: limits, Cost: cost, MaxWait: maxWait, Algorithm: alg}
}

func prec(n int, per, precision time.Duration) contract.Limit {
	return contract.Limit{N: n, Per: per, Precision: precision}
}

// TestAlgorithmCases checks each counting algorithm's exact slots on every
// store, on a fake clock that starts on a whole second (so windows and
// buckets of whole milliseconds start with it).
func TestAlgorithmCases(t *testing.T) { runCases(t, algorithmCases) }

type allowed struct {
	delay time.Duration
	cause contract.Cause
	limit int
}

// expect reserves and checks the answer: a delay when want is an allowed, a
// RetryAfter when it is a time.Duration.
func expect(t *testing.T, s store.Store, key string, r contract.Request, want any, msg string) contract.Reservation {
	t.Helper()
	res := reserve(t, s, key, r)
	switch w := want.(type) {
	case allowed:
		require.True(t, res.Allowed, "%s: refused, RetryAfter %s", msg, res.RetryAfter)
		assert.Equal(t, w.delay, res.Delay, msg)
		assert.Equal(t, w.cause, res.Cause, msg)
		assert.Equal(t, w.limit, res.Limit, msg)
	case time.Duration:
		require.False(t, res.Allowed, "%s: allowed, Delay %s", msg, res.Delay)
		assert.Equal(t, w, res.RetryAfter, msg)
	}
	return res
}

var algorithmCases = []conformanceCase{
	{"fixed: N per window, the next window at its start", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(3, time.Second)
		for i := range 3 {
			expect(t, s, key, algReq(contract.FixedWindow, 1, 0, l), allowed{0, contract.CauseNone, 0}, fmt.Sprint("unit ", i))
		}
		clock.Advance(400 * time.Millisecond)
		expect(t, s, key, algReq(contract.FixedWindow, 1, 0, l), 600*time.Millisecond, "window full")
		expect(t, s, key, algReq(contract.FixedWindow, 2, time.Second, l), allowed{600 * time.Millisecond, contract.CauseLimit, 0}, "reserved in the next window")
		expect(t, s, key, algReq(contract.FixedWindow, 2, time.Second, l), 1600*time.Millisecond, "next window too full for 2")
		expect(t, s, key, algReq(contract.FixedWindow, 1, time.Second, l), allowed{600 * time.Millisecond, contract.CauseLimit, 0}, "one fits")
	}},
	{"fixed: 2N across a window edge (its known weakness)", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(3, time.Second)
		clock.Advance(900 * time.Millisecond)
		expect(t, s, key, algReq(contract.FixedWindow, 3, 0, l), allowed{0, contract.CauseNone, 0}, "3 at 0.9s")
		clock.Advance(100 * time.Millisecond)
		expect(t, s, key, algReq(contract.FixedWindow, 3, 0, l), allowed{0, contract.CauseNone, 0}, "3 more at 1.0s: 6 in 100ms")
	}},
	{"fixed: two limits", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		ls := []contract.Limit{lim(2, 100*time.Millisecond), lim(3, time.Second)}
		expect(t, s, key, algReq(contract.FixedWindow, 2, time.Second, ls...), allowed{0, contract.CauseNone, 0}, "2 now")
		expect(t, s, key, algReq(contract.FixedWindow, 1, time.Second, ls...), allowed{100 * time.Millisecond, contract.CauseLimit, 0}, "short window full")
		expect(t, s, key, algReq(contract.FixedWindow, 1, 2*time.Second, ls...), allowed{time.Second, contract.CauseLimit, 1}, "long window full")
	}},
	{"counter: seed 003's arithmetic", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(10, time.Second)
		expect(t, s, key, algReq(contract.SlidingCounter, 10, 0, l), allowed{0, contract.CauseNone, 0}, "10 at 0")
		clock.Advance(1250 * time.Millisecond)
		// estimate 10 * 0.75 = 7.5: room for 2.
		expect(t, s, key, algReq(contract.SlidingCounter, 2, 0, l), allowed{0, contract.CauseNone, 0}, "2 at 1.25s")
		// 10 * (1 - f) + 2 + 1 <= 10 from f = 0.3: 50ms on.
		expect(t, s, key, algReq(contract.SlidingCounter, 1, 0, l), 50*time.Millisecond, "third waits")
		expect(t, s, key, algReq(contract.SlidingCounter, 1, time.Second, l), allowed{50 * time.Millisecond, contract.CauseLimit, 0}, "reserved")
	}},
	{"counter: a full window waits for the next", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(4, time.Second)
		clock.Advance(200 * time.Millisecond)
		expect(t, s, key, algReq(contract.SlidingCounter, 4, 0, l), allowed{0, contract.CauseNone, 0}, "4 at 0.2s")
		// Window 0 is full: window 1 starts with estimate 4, which falls by
		// 1 every 250ms: cost 2 fits from 1.5s.
		expect(t, s, key, algReq(contract.SlidingCounter, 2, 2*time.Second, l), allowed{1300 * time.Millisecond, contract.CauseLimit, 0}, "2 at 1.5s")
		// Now window 1 holds 2: estimate 4·(1-f)+2 leaves 1 from f = 0.75.
		expect(t, s, key, algReq(contract.SlidingCounter, 1, 2*time.Second, l), allowed{1550 * time.Millisecond, contract.CauseLimit, 0}, "1 at 1.75s")
	}},
	{"counter: a unit now may not overfill a reserved next window", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(4, time.Second)
		clock.Advance(500 * time.Millisecond)
		a := expect(t, s, key, algReq(contract.SlidingCounter, 4, 0, l), allowed{0, contract.CauseNone, 0}, "4 at 0.5s")
		expect(t, s, key, algReq(contract.SlidingCounter, 2, 2*time.Second, l), allowed{time.Second, contract.CauseLimit, 0}, "2 at 1.5s")
		require.NoError(t, s.Cancel(ctx, a))
		// Window 0 is empty again, but 3 more there would make the estimate
		// at 1.0s 3 + 2 = 5.
		expect(t, s, key, algReq(contract.SlidingCounter, 3, 0, l), 2*time.Second, "3 would overfill window 1")
		expect(t, s, key, algReq(contract.SlidingCounter, 2, 0, l), allowed{0, contract.CauseNone, 0}, "2 fit")
	}},
	{"buckets: spans of B buckets", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := prec(4, time.Second, 250*time.Millisecond)
		expect(t, s, key, algReq(contract.Buckets, 2, 0, l), allowed{0, contract.CauseNone, 0}, "2 in bucket 0")
		clock.Advance(250 * time.Millisecond)
		expect(t, s, key, algReq(contract.Buckets, 2, 0, l), allowed{0, contract.CauseNone, 0}, "2 in bucket 1")
		clock.Advance(250 * time.Millisecond)
		expect(t, s, key, algReq(contract.Buckets, 1, 0, l), 500*time.Millisecond, "full until bucket 0 leaves")
		expect(t, s, key, algReq(contract.Buckets, 2, time.Second, l), allowed{500 * time.Millisecond, contract.CauseLimit, 0}, "2 in bucket 4")
		expect(t, s, key, algReq(contract.Buckets, 1, time.Second, l), allowed{750 * time.Millisecond, contract.CauseLimit, 0}, "1 in bucket 5")
	}},
	{"buckets: a unit now may not overfill a span with a reservation", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := prec(2, time.Second, 500*time.Millisecond) // B = 2
		first := expect(t, s, key, algReq(contract.Buckets, 2, 2*time.Second, l), allowed{0, contract.CauseNone, 0}, "2 in bucket 0")
		expect(t, s, key, algReq(contract.Buckets, 2, 2*time.Second, l), allowed{time.Second, contract.CauseLimit, 0}, "2 in bucket 2")
		require.NoError(t, s.Cancel(ctx, first))
		clock.Advance(600 * time.Millisecond)
		// Bucket 1 is free, but spans (1,2] and (2,3] would hold 3.
		expect(t, s, key, algReq(contract.Buckets, 1, 2*time.Second, l), allowed{1400 * time.Millisecond, contract.CauseLimit, 0}, "1 in bucket 4")
	}},
	{"buckets: precision zero is a fixed window", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(2, time.Second)
		clock.Advance(900 * time.Millisecond)
		expect(t, s, key, algReq(contract.Buckets, 2, 0, l), allowed{0, contract.CauseNone, 0}, "2 at 0.9s")
		clock.Advance(100 * time.Millisecond)
		expect(t, s, key, algReq(contract.Buckets, 2, 0, l), allowed{0, contract.CauseNone, 0}, "2 at 1.0s")
	}},
	{"each algorithm keeps its own state", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		for _, alg := range append([]contract.Algorithm{contract.SlidingLog}, countingAlgorithms...) {
			expect(t, s, key, algReq(alg, 1, 0, lim(1, time.Second)), allowed{0, contract.CauseNone, 0}, alg.String())
		}
	}},
	{"cancel gives the units back", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		for _, alg := range countingAlgorithms {
			r := algReq(alg, 2, 0, lim(2, time.Second))
			res := expect(t, s, key, r, allowed{0, contract.CauseNone, 0}, alg.String())
			// A full sliding counter needs its window and the next to pass.
			retry := map[contract.Algorithm]time.Duration{contract.SlidingCounter: 2 * time.Second}[alg]
			expect(t, s, key, r, max(retry, time.Second), alg.String()+" full")
			require.NoError(t, s.Cancel(ctx, res))
			expect(t, s, key, r, allowed{0, contract.CauseNone, 0}, alg.String()+" after cancel")
		}
	}},
	{"invalid precision", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		for name, r := range map[string]contract.Request{
			"precision on the log":   algReq(contract.SlidingLog, 1, 0, prec(1, time.Second, time.Millisecond)),
			"precision on fixed":     algReq(contract.FixedWindow, 1, 0, prec(1, time.Second, time.Millisecond)),
			"negative precision":     algReq(contract.Buckets, 1, 0, prec(1, time.Second, -time.Millisecond)),
			"precision above Per":    algReq(contract.Buckets, 1, 0, prec(1, time.Second, 2*time.Second)),
			"too many buckets":       algReq(contract.Buckets, 1, 0, prec(1, time.Second, 100*time.Microsecond)),
			"unknown algorithm":      algReq(contract.Algorithm(9), 1, 0, lim(1, time.Second)),
			"precision below 1µs":    algReq(contract.Buckets, 1, 0, prec(1, time.Second, time.Nanosecond)),
			"cost above N (buckets)": algReq(contract.Buckets, 3, 0, prec(2, time.Second, time.Millisecond*100)),
		} {
			_, err := s.Reserve(ctx, key, r)
			assert.ErrorIs(t, err, contract.ErrInvalidRequest, name)
		}
	}},
}

// randomLimits draws 1-3 limits for alg.
func randomLimits(rng *rand.Rand, alg contract.Algorithm) []contract.Limit {
	limits := make([]contract.Limit, 1+rng.IntN(3))
	for i := range limits {
		per := time.Duration(10+rng.IntN(2000)) * time.Millisecond
		limits[i] = lim(3+rng.IntN(18), per)
		if alg == contract.Buckets && rng.IntN(4) != 0 {
			limits[i].Precision = per / time.Duration(1+rng.IntN(8))
		}
	}
	return limits
}

// TestAlgorithmDifferential drives every store with the same random
// sequence of reservations, cancels and clock steps, and requires the same
// answer from each: memory.go's arithmetic and the Lua scripts agree.
func TestAlgorithmDifferential(t *testing.T) {
	ims := impls(t)
	for _, alg := range countingAlgorithms {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s/seed%d", alg, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(alg)))
				limits := randomLimits(rng, alg)
				clock := newFakeClock()
				clock.Advance(time.Duration(rng.IntN(1_000_000)) * time.Microsecond)
				stores := make([]store.Store, len(ims))
				for i, im := range ims {
					stores[i] = im.open(t, clock.Now)
				}
				key := uniqueKey(t)
				var held [][]contract.Reservation // per op, one per store
				refusals, upstream := 0, 0
				last := time.Now()
				for op := range 400 {
					if rng.IntN(16) == 0 {
						// What an upstream might say: every store hears the same.
						var l contract.Learned
						switch rng.IntN(3) {
						case 0:
							l.Pause = time.Duration(rng.IntN(300)) * time.Millisecond
						case 1:
							l.Limit = lim(2+rng.IntN(8), time.Duration(10+rng.IntN(1000))*time.Millisecond)
							l.LimitTTL = time.Duration(500+rng.IntN(2500)) * time.Millisecond
						default:
							l.Remaining = rng.IntN(6)
							l.Reset = time.Duration(rng.IntN(2000)) * time.Millisecond
						}
						for _, s := range stores {
							require.NoError(t, s.(contract.Feedback).Learn(ctx, key, l))
						}
						continue
					}
					if len(held) > 0 && rng.IntN(8) == 0 {
						i := rng.IntN(len(held))
						for j, s := range stores {
							require.NoError(t, s.Cancel(ctx, held[i][j]))
						}
						held = append(held[:i], held[i+1:]...)
						continue
					}
					r := algReq(alg, 1+rng.IntN(3), time.Duration(rng.IntN(3000))*time.Millisecond, limits...)
					if rng.IntN(2) == 0 {
						r.MaxServerWait = time.Duration(rng.IntN(500)) * time.Millisecond
					}
					var got []contract.Reservation
					for _, s := range stores {
						got = append(got, reserve(t, s, key, r))
					}
					for j := 1; j < len(got); j++ {
						a, b := got[0], got[j]
						require.Equal(t,
							[]any{a.Allowed, a.Delay, a.RetryAfter, a.Slot, a.Limit, a.Cause},
							[]any{b.Allowed, b.Delay, b.RetryAfter, b.Slot, b.Limit, b.Cause},
							"op %d, %s vs %s, limits %v", op, ims[0].name, ims[j].name, limits)
					}
					if got[0].Allowed {
						held = append(held, got)
					} else {
						refusals++
					}
					if got[0].Cause == contract.CauseUpstream || got[0].Cause == contract.CauseLearned {
						upstream++
					}
					// Redis expires keys in real time: the fake clock must
					// never move slower, or a key would vanish in Redis
					// while the memory store still holds it.
					clock.Advance(time.Duration(rng.IntN(10_000))*time.Microsecond + 2*time.Since(last))
					last = time.Now()
				}
				assert.Positive(t, refusals, "the sequence never filled a window; it proves little")
				assert.Positive(t, upstream, "no answer came from the feedback; it proves little")
			})
		}
	}
}

// TestAlgorithmProperty is what each counting algorithm promises, under
// concurrent load on every store: the units that stay recorded never put more
// than N in a fixed window (FixedWindow, SlidingCounter) or in a span of
// ceil(Per/Precision) buckets (Buckets); and the load does fill them.
func TestAlgorithmProperty(t *testing.T) {
	for _, im := range impls(t) {
		for _, alg := range countingAlgorithms {
			t.Run(im.name+"/"+alg.String(), func(t *testing.T) {
				for seed := range uint64(2) {
					runAlgorithmProperty(t, im, alg, seed)
				}
			})
		}
	}
}

func runAlgorithmProperty(t *testing.T, im impl, alg contract.Algorithm, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	limits := randomLimits(rng, alg)
	// Memory on a fake clock that the workers move; Redis on its own TIME
	// (with client clocks, a caller whose clock is behind another's may
	// count in windows that one has already dropped, as WithClientTime says).
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
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range 40 {
				cost := 1 + r.IntN(3)
				res, err := s.Reserve(ctx, key, algReq(alg, cost, time.Duration(r.IntN(3000))*time.Millisecond, limits...))
				if !assert.NoError(t, err) {
					return
				}
				if res.Allowed && r.IntN(5) == 0 {
					assert.NoError(t, s.Cancel(ctx, res))
				} else if res.Allowed {
					mu.Lock()
					log = append(log, sent{res.Slot, cost})
					mu.Unlock()
				}
				clock.Advance(time.Duration(r.IntN(5_000)) * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	require.NotEmpty(t, log)
	full := false
	for _, l := range limits {
		most := maxInSpans(log, alg, l)
		require.LessOrEqual(t, most, l.N, "limit %s", l)
		full = full || most == l.N
		if alg == contract.SlidingCounter {
			// The estimate weighs the previous window, so a window itself
			// seldom fills: two windows together reaching N show the
			// counter at work.
			full = full || maxInTwoWindows(log, l) >= l.N
		}
	}
	assert.True(t, full, "the load never filled a window; the test proves nothing")
}

// maxInSpans returns the most units in one aligned window (FixedWindow,
// SlidingCounter) or span of buckets (Buckets) of l.
func maxInSpans(log []sent, alg contract.Algorithm, l contract.Limit) int {
	length, n := l.Per.Microseconds(), int64(1)
	if alg == contract.Buckets {
		if l.Precision != 0 {
			length = l.Precision.Microseconds()
		}
		n = (l.Per.Microseconds() + length - 1) / length
	}
	per := map[int64]int{}
	for _, e := range log {
		per[e.slot/length] += e.cost
	}
	most := 0
	for k := range per {
		sum := 0
		for j := k; j < k+n; j++ { // the span ending at j holds k
			sum = 0
			for i := j - n + 1; i <= j; i++ {
				sum += per[i]
			}
			most = max(most, sum)
		}
	}
	return most
}

// maxInTwoWindows returns the most units in two adjacent aligned windows.
func maxInTwoWindows(log []sent, l contract.Limit) int {
	per := map[int64]int{}
	for _, e := range log {
		per[e.slot/l.Per.Microseconds()] += e.cost
	}
	most := 0
	for k, v := range per {
		most = max(most, v+per[k-1])
	}
	return most
}

func TestParseAlgorithm(t *testing.T) {
	for _, alg := range append([]contract.Algorithm{contract.SlidingLog}, countingAlgorithms...) {
		got, err := contract.ParseAlgorithm(alg.String())
		require.NoError(t, err)
		assert.Equal(t, alg, got)
	}
	_, err := contract.ParseAlgorithm("leaky")
	assert.ErrorContains(t, err, `unknown algorithm "leaky"`)
	assert.Equal(t, "Algorithm(9)", contract.Algorithm(9).String())
}

// TestAlgorithmFootprint measures, on a real redis-server, what a key costs
// under each algorithm at a large limit: 1,000,000 per day, after a day of
// 694 units a minute (999,360 units). It logs MEMORY USAGE of the key, the
// server's time per script call (INFO commandstats) and its CPU per decision
// (INFO cpu, which adds the network's share, over 2,000 decisions, beside
// 2,000 PINGs); the README's table quotes them. Memory is asserted loosely;
// times only logged.
func TestAlgorithmFootprint(t *testing.T) {
	c := realRedis(t)
	clock := newFakeClock()
	s, err := redisstore.NewRedis(c, redisstore.WithClientTime(clock.Now))
	require.NoError(t, err)
	day := 24 * time.Hour
	cases := []struct {
		name     string
		alg      contract.Algorithm
		limit    contract.Limit
		maxBytes int64
	}{
		{"log", contract.SlidingLog, lim(1_000_000, day), 12_000_000},
		{"fixed", contract.FixedWindow, lim(1_000_000, day), 256},
		{"counter", contract.SlidingCounter, lim(1_000_000, day), 256},
		{"buckets 1h", contract.Buckets, prec(1_000_000, day, time.Hour), 2048},
		{"buckets 1m", contract.Buckets, prec(1_000_000, day, time.Minute), 128 << 10},
	}
	cpuPing := serverCPU(t, c, func() {
		for range 2000 {
			require.NoError(t, c.Ping(ctx).Err())
		}
	})
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-12s %-14s %-16s %-11s %s\n", "algorithm", "MEMORY USAGE", "script µs/call", "CPU µs", "CPU vs PING")
	for _, tc := range cases {
		key := uniqueKey(t)
		for range 1440 {
			res := reserve(t, s, key, algReq(tc.alg, 694, 0, tc.limit))
			require.True(t, res.Allowed, "%s: refused while filling", tc.name)
			clock.Advance(time.Minute)
		}
		bytes, err := c.MemoryUsage(ctx, s.RedisKeyFor(key, tc.alg), 0).Result()
		require.NoError(t, err)
		require.NoError(t, c.ConfigResetStat(ctx).Err())
		cpu := serverCPU(t, c, func() {
			for range 2000 {
				reserve(t, s, key, algReq(tc.alg, 1, 0, tc.limit))
				clock.Advance(10 * time.Millisecond)
			}
		})
		fmt.Fprintf(&table, "%-12s %-14d %-16.1f %-11.1f %.1fx\n", tc.name, bytes, scriptMicros(t, c), cpu/2000*1e6, cpu/cpuPing)
		assert.LessOrEqual(t, bytes, tc.maxBytes, tc.name)
	}
	t.Logf("a key at 1,000,000 per day holding 999,360 units (redis-server):%s", table.String())
}

// scriptMicros returns the server's time per script call (EVALSHA and
// EVAL) since the last CONFIG RESETSTAT, from INFO commandstats.
func scriptMicros(t *testing.T, c *redis.Client) float64 {
	info, err := c.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	var calls, usec float64
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += x
			case "usec":
				usec += x
			}
		}
	}
	require.Positive(t, calls)
	return usec / calls
}

// serverCPU runs f and returns the server's CPU seconds (user + system) it cost.
func serverCPU(t *testing.T, c *redis.Client, f func()) float64 {
	read := func() float64 {
		info, err := c.Info(ctx, "cpu").Result()
		require.NoError(t, err)
		var sum float64
		for line := range strings.SplitSeq(info, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
				x, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err)
				sum += x
			}
		}
		return sum
	}
	before := read()
	f()
	return read() - before
}

// TestMemoryDefaultClock runs feedback and every algorithm on a Memory store
// with its own clock (no WithClock), as programs use it.
func TestMemoryDefaultClock(t *testing.T) {
	m, err := memstore.NewMemory()
	require.NoError(t, err)
	require.NoError(t, m.Learn(ctx, "k", contract.Learned{Pause: time.Millisecond}))
	for _, alg := range append([]contract.Algorithm{contract.SlidingLog}, countingAlgorithms...) {
		res := reserve(t, m, "k", algReq(alg, 1, time.Second, lim(1, time.Second)))
		require.True(t, res.Allowed, alg.String())
		assert.Equal(t, contract.CauseUpstream, res.Cause, "%s: the pause holds the slot", alg)
		assert.Greater(t, res.Delay, time.Duration(0), alg.String())
	}
}
