package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	redistest.StopSharedCluster()
	os.Exit(code)
}

// fakeClock is a clock the tests move by hand; both stores can run on it (the
// Redis store through WithClientTime), so the suite checks exact slots.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Unix(1_700_000_000, 0)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// moving advances c by a random step below most every tick (a real-time
// pause) until the returned stop is called, while a property test's workers
// reserve: the stores then see a clock that moves between and during calls.
func (c *fakeClock) moving(seed uint64, most, tick time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		r := rand.New(rand.NewPCG(seed, 99))
		for {
			select {
			case <-quit:
				return
			default:
				c.Advance(time.Duration(r.Int64N(int64(most))))
				time.Sleep(tick)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// impl is one store under test.
type impl struct {
	name string
	// open returns a store on clock, or on its own real clock when clock is nil.
	open func(t *testing.T, clock func() time.Time) store.Store
}

var keySeq atomic.Int64

// uniqueKey gives each test its own keys on the shared Redis.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", t.Name(), time.Now().UnixNano(), keySeq.Add(1))
}

func impls(t *testing.T) []impl {
	memory := impl{"memory", func(t *testing.T, clock func() time.Time) store.Store {
		var opts []memstore.MemoryOption
		if clock != nil {
			opts = append(opts, memstore.WithClock(clock))
		}
		m, err := memstore.NewMemory(opts...)
		require.NoError(t, err)
		return m
	}}
	redisOn := func(srv func(t *testing.T) *redistest.Server) func(t *testing.T, clock func() time.Time) store.Store {
		return func(t *testing.T, clock func() time.Time) store.Store {
			var opts []redisstore.RedisOption
			if clock != nil {
				opts = append(opts, redisstore.WithClientTime(clock))
			}
			r, err := redisstore.NewRedis(srv(t).Client(t), opts...)
			require.NoError(t, err)
			return r
		}
	}
	shared := redistest.Shared(t)
	name := "redis-server"
	if !shared.Real {
		name = "redis-fallback-miniredis"
	}
	return []impl{
		memory,
		{name, redisOn(func(t *testing.T) *redistest.Server { return redistest.Shared(t) })},
		// The same server through WithBatching: concurrent reservations share
		// pipelines (the property tests), lone ones go alone (the cases). Its
		// own prefix: the differential tests use one key on every store.
		{name + "-batched", func(t *testing.T, clock func() time.Time) store.Store {
			opts := []redisstore.RedisOption{redisstore.WithBatching(64), redisstore.WithPrefix("batched:")}
			if clock != nil {
				opts = append(opts, redisstore.WithClientTime(clock))
			}
			r, err := redisstore.NewRedis(redistest.Shared(t).Client(t), opts...)
			require.NoError(t, err)
			return r
		}},
		// The examples run on miniredis: the scripts must behave the same there.
		{"miniredis", redisOn(func(t *testing.T) *redistest.Server { return redistest.Mini(t) })},
		// A real Redis Cluster (3 masters, 3 replicas) through a ClusterClient:
		// a script touching a key outside its declared key's slot fails there.
		{"redis-cluster", func(t *testing.T, clock func() time.Time) store.Store {
			var opts []redisstore.RedisOption
			if clock != nil {
				opts = append(opts, redisstore.WithClientTime(clock))
			}
			r, err := redisstore.NewRedis(redistest.SharedCluster(t).Client(t), opts...)
			require.NoError(t, err)
			return r
		}},
	}
}

func req(cost int, maxWait time.Duration, limits ...contract.Limit) contract.Request {
	return contract.Request{Limits: limits, Cost: cost, MaxWait: maxWait}
}

func lim(n int, per time.Duration) contract.Limit { return contract.Limit{N: n, Per: per} }

// TestConformance runs the same cases, with the same expectations, on every
// store, on a fake clock so that every slot is exact.
func TestConformance(t *testing.T) { runCases(t, conformanceCases) }

// runCases runs cases on every store, each on a fresh fake clock and key.
func runCases(t *testing.T, cases []conformanceCase) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					clock := newFakeClock()
					c.run(t, im.open(t, clock.Now), clock, uniqueKey(t))
				})
			}
		})
	}
}

// injector writes into a store's state what no reservation could have
// (export_test.go), as another program writing under the prefix would.
type injector interface {
	InjectEntry(key string, at int64) error
	InjectPace(key string, tat int64) error
}

type conformanceCase struct {
	name string
	run  func(t *testing.T, s store.Store, clock *fakeClock, key string)
}

var ctx = context.Background()

func reserve(t *testing.T, s store.Store, key string, r contract.Request) contract.Reservation {
	t.Helper()
	res, err := s.Reserve(ctx, key, r)
	require.NoError(t, err)
	return res
}

var conformanceCases = []conformanceCase{
	{"N at once, then refused with RetryAfter = W", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		for i := range 3 {
			res := reserve(t, s, key, req(1, 0, lim(3, time.Second)))
			require.True(t, res.Allowed, "request %d", i)
			assert.Equal(t, time.Duration(0), res.Delay)
			clock.Advance(100 * time.Millisecond)
		}
		res := reserve(t, s, key, req(1, 0, lim(3, time.Second)))
		assert.False(t, res.Allowed)
		assert.Equal(t, 700*time.Millisecond, res.RetryAfter)
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 0, res.Limit)
	}},
	{"a refusal records nothing", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, lim(2, time.Second))
		reserve(t, s, key, r)
		reserve(t, s, key, r)
		for range 20 {
			assert.False(t, reserve(t, s, key, r).Allowed)
		}
		clock.Advance(time.Second)
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.False(t, reserve(t, s, key, r).Allowed)
	}},
	{"waiters queue in order, each a window after its N-th predecessor", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(2, time.Second))
		var delays []time.Duration
		for range 7 {
			res := reserve(t, s, key, r)
			require.True(t, res.Allowed)
			delays = append(delays, res.Delay)
		}
		assert.Equal(t, []time.Duration{0, 0, time.Second, time.Second, 2 * time.Second, 2 * time.Second, 3 * time.Second}, delays)
	}},
	{"a slot beyond MaxWait is refused, within it granted", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		reserve(t, s, key, req(1, 0, lim(1, time.Second)))
		clock.Advance(200 * time.Millisecond)
		res := reserve(t, s, key, req(1, 799*time.Millisecond, lim(1, time.Second)))
		assert.False(t, res.Allowed)
		assert.Equal(t, 800*time.Millisecond, res.RetryAfter)
		res = reserve(t, s, key, req(1, 800*time.Millisecond, lim(1, time.Second)))
		assert.True(t, res.Allowed)
		assert.Equal(t, 800*time.Millisecond, res.Delay)
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 0, res.Limit)
	}},
	{"the window slides: units come back one window after their send", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, lim(4, time.Second))
		reserve(t, s, key, r)
		reserve(t, s, key, r) // two at 0
		clock.Advance(500 * time.Millisecond)
		reserve(t, s, key, r)
		reserve(t, s, key, r) // two at 0.5s
		clock.Advance(499 * time.Millisecond)
		assert.False(t, reserve(t, s, key, r).Allowed, "at 0.999s the window holds 4")
		clock.Advance(time.Millisecond)
		assert.True(t, reserve(t, s, key, r).Allowed, "at 1s the two sent at 0 have left")
		assert.True(t, reserve(t, s, key, r).Allowed)
		res := reserve(t, s, key, r)
		assert.False(t, res.Allowed, "a fixed window would reset here; a sliding one does not")
		assert.Equal(t, 500*time.Millisecond, res.RetryAfter)
	}},
	{"cost takes that many units", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		assert.True(t, reserve(t, s, key, req(3, 0, lim(5, time.Second))).Allowed)
		res := reserve(t, s, key, req(3, 0, lim(5, time.Second)))
		assert.False(t, res.Allowed, "3 + 3 > 5")
		assert.Equal(t, time.Second, res.RetryAfter)
		assert.True(t, reserve(t, s, key, req(2, 0, lim(5, time.Second))).Allowed, "3 + 2 = 5")
		assert.False(t, reserve(t, s, key, req(1, 0, lim(5, time.Second))).Allowed)
		res = reserve(t, s, key, req(5, time.Hour, lim(5, time.Second)))
		assert.True(t, res.Allowed)
		assert.Equal(t, time.Second, res.Delay, "all five units free again one window later")
	}},
	{"several limits are checked together and the binding one is named", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		limits := []contract.Limit{lim(2, 100*time.Millisecond), lim(3, time.Second)}
		r := contract.Request{Limits: limits, Cost: 1, MaxWait: time.Hour}
		var got []contract.Reservation
		for range 5 {
			got = append(got, reserve(t, s, key, r))
		}
		delays := []time.Duration{}
		for _, g := range got {
			delays = append(delays, g.Delay)
		}
		assert.Equal(t, []time.Duration{0, 0, 100 * time.Millisecond, time.Second, time.Second}, delays)
		causes, limitIdx := []contract.Cause{}, []int{}
		for _, g := range got {
			causes, limitIdx = append(causes, g.Cause), append(limitIdx, g.Limit)
		}
		assert.Equal(t, []contract.Cause{contract.CauseNone, contract.CauseNone, contract.CauseLimit, contract.CauseLimit, contract.CauseLimit}, causes)
		assert.Equal(t, []int{0, 0, 0, 1, 1}, limitIdx)
	}},
	{"cancel gives the slot back to the next request", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(1, time.Second))
		reserve(t, s, key, r)
		waiting := reserve(t, s, key, r)
		require.Equal(t, time.Second, waiting.Delay)
		require.NoError(t, s.Cancel(ctx, waiting))
		again := reserve(t, s, key, r)
		assert.Equal(t, time.Second, again.Delay, "the cancelled slot is free again")
		assert.Equal(t, 2*time.Second, reserve(t, s, key, r).Delay)
	}},
	{"cancel removes only its own units", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(2, time.Hour, lim(4, time.Second))
		reserve(t, s, key, r)
		reserve(t, s, key, r)
		a := reserve(t, s, key, r) // 2 units at 1s
		b := reserve(t, s, key, r) // 2 units at 1s
		require.Equal(t, a.Slot, b.Slot)
		require.NoError(t, s.Cancel(ctx, a))
		// Two units at 1s remain: two more fit at 1s, then the next must wait.
		assert.Equal(t, time.Second, reserve(t, s, key, r).Delay)
		assert.Equal(t, 2*time.Second, reserve(t, s, key, r).Delay)
	}},
	{"cancel of a refusal or of a spent reservation is harmless", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, lim(1, time.Second))
		first := reserve(t, s, key, r)
		refused := reserve(t, s, key, r)
		require.False(t, refused.Allowed)
		require.NoError(t, s.Cancel(ctx, refused))
		assert.False(t, reserve(t, s, key, r).Allowed)
		clock.Advance(5 * time.Second) // the log has expired
		require.NoError(t, s.Cancel(ctx, first))
		assert.True(t, reserve(t, s, key, r).Allowed)
	}},
	{"a cancel never frees a unit still inside a window", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(1, time.Second))
		reserve(t, s, key, r) // sent at 0
		for range 3 {
			waiting := reserve(t, s, key, r)
			require.Equal(t, time.Second, waiting.Delay)
			require.NoError(t, s.Cancel(ctx, waiting))
		}
		assert.Equal(t, time.Second, reserve(t, s, key, r).Delay, "the unit sent at 0 still counts")
	}},
	{"a large cost is one reservation", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(9000, time.Hour, lim(10_000, time.Second))
		assert.True(t, reserve(t, s, key, r).Allowed)
		res := reserve(t, s, key, r)
		assert.True(t, res.Allowed)
		assert.Equal(t, time.Second, res.Delay)
		require.NoError(t, s.Cancel(ctx, res))
		assert.Equal(t, time.Duration(0), reserve(t, s, key, req(1000, time.Hour, lim(10_000, time.Second))).Delay,
			"1000 fit beside the first 9000 at once: the cancelled 9000 are gone")
		assert.Equal(t, time.Second, reserve(t, s, key, req(1, time.Hour, lim(10_000, time.Second))).Delay)
	}},
	{"keys are independent", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, lim(1, time.Second))
		assert.True(t, reserve(t, s, key+"a", r).Allowed)
		assert.True(t, reserve(t, s, key+"b", r).Allowed)
		assert.False(t, reserve(t, s, key+"a", r).Allowed)
	}},
	{"order holds when the clock steps back", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(1, time.Second))
		reserve(t, s, key, r)
		second := reserve(t, s, key, r)
		require.Equal(t, time.Second, second.Delay)
		clock.Advance(-10 * time.Second)
		third := reserve(t, s, key, r)
		assert.GreaterOrEqual(t, third.Slot, second.Slot+int64(time.Second/time.Microsecond))
		assert.Equal(t, contract.CauseLimit, third.Cause)
		clock.Advance(-10 * time.Second)
		fourth := reserve(t, s, key, req(1, time.Hour, lim(100, time.Second)))
		assert.Equal(t, third.Slot, fourth.Slot, "a looser limit admits at once; the order holds it to the last entry")
		assert.Equal(t, contract.CauseOrder, fourth.Cause)
		assert.Equal(t, 0, fourth.Limit)
	}},
	{"an idle key starts afresh", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(2, time.Hour, lim(2, time.Second))
		reserve(t, s, key, r)
		reserve(t, s, key, r)
		clock.Advance(3 * time.Second)
		assert.Equal(t, time.Duration(0), reserve(t, s, key, r).Delay)
	}},
	{"an allowance records the units that much after the slot", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(2, time.Second))
		r.Allowance = 100 * time.Millisecond
		first := reserve(t, s, key, r)
		require.True(t, first.Allowed)
		assert.Equal(t, time.Duration(0), first.Delay, "the slot itself is not moved")
		assert.Equal(t, first.Slot+100_000, first.Entry)
		second := reserve(t, s, key, req(1, time.Hour, lim(2, time.Second)))
		assert.Equal(t, 100*time.Millisecond, second.Delay, "without an allowance, never before the last entry")
		assert.Equal(t, contract.CauseOrder, second.Cause)
		assert.Equal(t, first.Entry, second.Entry)
		third := reserve(t, s, key, r)
		assert.Equal(t, 1100*time.Millisecond, third.Delay, "one window after the first unit's latest send")
		assert.Equal(t, third.Slot+100_000, third.Entry)
		// Cancel removes the entries by their recorded time.
		require.NoError(t, s.Cancel(ctx, third))
		again := reserve(t, s, key, r)
		assert.Equal(t, 1100*time.Millisecond, again.Delay, "the cancelled slot is free again")
	}},
	{"a reservation with an allowance is not held behind a later entry", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		slow := req(1, time.Hour, lim(3, time.Second))
		slow.Allowance = 300 * time.Millisecond
		a := reserve(t, s, key, slow)
		fast := req(1, time.Hour, lim(3, time.Second))
		fast.Allowance = time.Millisecond
		b := reserve(t, s, key, fast)
		assert.Equal(t, time.Duration(0), b.Delay)
		assert.Equal(t, contract.CauseNone, b.Cause, "an allowance is not held by the order")
		assert.Equal(t, a.Entry, b.Entry, "recorded at the last entry, which is later than its own slot + allowance")
		c := reserve(t, s, key, fast)
		assert.Equal(t, time.Duration(0), c.Delay)
		d := reserve(t, s, key, fast)
		assert.Equal(t, 1300*time.Millisecond, d.Delay, "the oldest of the three is counted at its latest send")
	}},
	{"invalid requests are refused with ErrInvalidRequest", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		for name, r := range map[string]contract.Request{
			"no limits":            {Cost: 1},
			"cost 0":               req(0, 0, lim(1, time.Second)),
			"cost above N":         req(3, 0, lim(5, time.Second), lim(2, time.Second)),
			"N 0":                  req(1, 0, lim(0, time.Second)),
			"window 0":             req(1, 0, lim(1, 0)),
			"negative wait":        req(1, -time.Second, lim(1, time.Second)),
			"negative limit":       req(1, 0, lim(-1, time.Second)),
			"window 1ns":           req(1, 0, lim(1, time.Nanosecond)),
			"negative server wait": {Limits: []contract.Limit{lim(1, time.Second)}, Cost: 1, MaxServerWait: -time.Second},
			"negative allowance":   {Limits: []contract.Limit{lim(1, time.Second)}, Cost: 1, Allowance: -time.Millisecond},
			"allowance too large":  {Limits: []contract.Limit{lim(1, time.Second)}, Cost: 1, Allowance: contract.MaxAllowance + time.Microsecond},
			"counted allowance":    {Limits: []contract.Limit{lim(1, time.Second)}, Cost: 1, Allowance: time.Millisecond, Algorithm: contract.FixedWindow},
		} {
			_, err := s.Reserve(ctx, key, r)
			assert.ErrorIs(t, err, contract.ErrInvalidRequest, name)
		}
		_, err := s.Reserve(ctx, "", req(1, 0, lim(1, time.Second)))
		assert.ErrorIs(t, err, contract.ErrInvalidRequest, "empty key")
	}},
	{"an entry no reservation could have written is repaired", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		// As a Transport reserves: no wait, a small allowance. An entry an
		// hour ahead lies past anything a reservation of a 5 per second log
		// records (its wait, MaxAllowance and its window).
		r := req(1, 0, lim(5, time.Second))
		r.Allowance = time.Millisecond
		reserve(t, s, key, r)
		reserve(t, s, key, r)
		require.NoError(t, s.(injector).InjectEntry(key, clock.Now().Add(time.Hour).UnixMicro()))
		clock.Advance(1001 * time.Millisecond) // the first two have left the window, not the log
		for i := range 5 {
			res := reserve(t, s, key, r)
			require.True(t, res.Allowed, "request %d: not held back by the bad entry", i)
			assert.Equal(t, time.Duration(0), res.Delay)
		}
		u, err := s.(contract.Inspector).Usage(ctx, key, r)
		require.NoError(t, err)
		assert.Less(t, u.Last, time.Second, "the bad entry is gone, and nothing was recorded after it")
	}},
	{"a paced time no reservation could have left is repaired", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := contract.Request{Limits: []contract.Limit{lim(100, time.Second), paced(10, time.Second, 1)}, Cost: 1}
		require.True(t, reserve(t, s, key, r).Allowed)
		require.NoError(t, s.(injector).InjectPace(key, clock.Now().Add(time.Hour).UnixMicro()))
		clock.Advance(time.Second)
		res := reserve(t, s, key, r)
		require.True(t, res.Allowed, "not held back an hour: %+v", res)
		assert.Equal(t, time.Duration(0), res.Delay)
		res = reserve(t, s, key, r)
		assert.True(t, res.Allowed, "the burst of the repaired pace")
		res = reserve(t, s, key, r)
		assert.False(t, res.Allowed)
		assert.Equal(t, 100*time.Millisecond, res.RetryAfter, "then the pace itself")
	}},
	{"a cancelled context is an error, not a refusal", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.Reserve(cctx, key, req(1, 0, lim(1, time.Second)))
		assert.ErrorIs(t, err, context.Canceled)
	}},
}

// TestServerClock checks the stores on their own clocks (Redis TIME): the
// reply is a duration, whatever the client's clock says.
func TestServerClock(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			s, key := im.open(t, nil), uniqueKey(t)
			r := req(1, time.Hour, lim(2, time.Hour))
			assert.Equal(t, time.Duration(0), reserve(t, s, key, r).Delay)
			assert.Equal(t, time.Duration(0), reserve(t, s, key, r).Delay)
			d := reserve(t, s, key, r).Delay
			assert.Greater(t, d, 59*time.Minute)
			assert.LessOrEqual(t, d, time.Hour)
		})
	}
}

// TestDecided checks that an allowed reservation tells the store's clock at
// its decision: between the call and its reply (every server here runs on
// this machine's clock), not the slot, which lies Delay after it.
func TestDecided(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			s, key := im.open(t, nil), uniqueKey(t)
			r := req(1, 2*time.Hour, lim(1, time.Hour))
			for range 2 {
				asked := time.Now()
				res := reserve(t, s, key, r)
				replied := time.Now()
				require.True(t, res.Allowed)
				assert.GreaterOrEqual(t, res.Decided(), asked.Add(-time.Second).UnixMicro())
				assert.LessOrEqual(t, res.Decided(), replied.Add(time.Second).UnixMicro())
			}
			refused := reserve(t, s, key, req(1, 0, lim(1, time.Hour)))
			assert.Zero(t, refused.Decided(), "nothing decided for a refusal")
		})
	}
}

// TestProperty is the guarantee itself: many goroutines reserve with random
// costs against random limits, some cancel, and the slots that stay recorded
// never put more than N units in any window (t-W, t] of any limit.
func TestProperty(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for seed := range uint64(3) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					runProperty(t, im, seed, nil)
				})
			}
		})
	}
}

// TestPropertyAllowance is TestProperty with callers of different
// allowances, each sending anywhere within its own: at its slot, at the end
// of its allowance, or in between. No window may hold more than N. (Recording
// the units at the slot instead of slot + allowance, in either store, fails
// it at once: 13 units in a window of 12, 17 in one of 15.)
func TestPropertyAllowance(t *testing.T) {
	allowances := []time.Duration{0, 0, 0, 0, time.Millisecond, time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond,
		20 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 0, 0, 0}
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for seed := range uint64(3) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					runProperty(t, im, seed, allowances)
				})
			}
		})
	}
}

type sent struct {
	slot int64 // microseconds
	cost int
}

// runProperty reserves from 16 workers at once and checks the windows of
// what they sent. Worker w has allowances[w] (none when nil), and sends at
// its slot, at the end of its allowance or in between, at random.
func runProperty(t *testing.T, im impl, seed uint64, allowances []time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 42))
	limits := make([]contract.Limit, 1+rng.IntN(3))
	maxCost := 3
	for i := range limits {
		limits[i] = lim(maxCost+rng.IntN(18), time.Duration(10+rng.IntN(2000))*time.Millisecond)
	}
	t.Logf("seed %d limits %v", seed, limits)
	// Memory runs on a fake clock that moves while the workers reserve; Redis
	// on its own TIME. (With WithClientTime, callers racing with stale clocks
	// may be off by their staleness, as its documentation says.)
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
	var bound atomic.Int64 // reservations whose slot a limit set
	var wg sync.WaitGroup
	const workers, each = 16, 40
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range each {
				cost := 1 + r.IntN(maxCost)
				rq := req(cost, time.Duration(r.IntN(3000))*time.Millisecond, limits...)
				if allowances != nil {
					rq.Allowance = allowances[w]
				}
				res, err := s.Reserve(ctx, key, rq)
				if !assert.NoError(t, err) {
					return
				}
				if !res.Allowed {
					continue
				}
				if res.Cause == contract.CauseLimit {
					bound.Add(1)
				}
				if r.IntN(5) == 0 {
					assert.NoError(t, s.Cancel(ctx, res))
					continue
				}
				at := res.Slot
				switch a := rq.Allowance.Microseconds(); r.IntN(3) {
				case 1:
					at += a
				case 2:
					at += r.Int64N(a + 1)
				}
				mu.Lock()
				log = append(log, sent{at, cost})
				mu.Unlock()
			}
		}()
	}
	// The clock moves while the workers reserve.
	stop := clock.moving(seed, 20_000*time.Microsecond, 50*time.Microsecond)
	wg.Wait()
	stop()
	require.NotEmpty(t, log)
	for _, l := range limits {
		if n, at := maxInWindow(log, l.Per); n > l.N {
			t.Fatalf("limit %s: %d units in the window ending at %d", l, n, at)
		}
	}
	// The check has teeth: without allowances, the same log overfills a
	// window one unit smaller. With them, sends later than their slots may
	// leave every window short of N; then the limits must at least have
	// set slots (breaking the allowance's record fails this test: see
	// TestPropertyAllowance).
	tight := false
	for _, l := range limits {
		if n, _ := maxInWindow(log, l.Per); n == l.N {
			tight = true
		}
	}
	if allowances != nil {
		t.Logf("%d slots set by a limit, some window full: %v", bound.Load(), tight)
		tight = tight || bound.Load() > 0
	}
	assert.True(t, tight, "the load never filled a window; the test proves nothing")
}

// maxInWindow returns the most units in any window (t-W, t] of the log, and
// the end of such a window.
func maxInWindow(log []sent, w time.Duration) (most int, at int64) {
	log = slices.Clone(log)
	slices.SortFunc(log, func(a, b sent) int { return int(a.slot - b.slot) })
	wus := int64(w / time.Microsecond)
	sum, lo := 0, 0
	for hi := range log {
		sum += log[hi].cost
		for log[lo].slot <= log[hi].slot-wus {
			sum -= log[lo].cost
			lo++
		}
		if sum > most {
			most, at = sum, log[hi].slot
		}
	}
	return most, at
}

func TestMaxInWindow(t *testing.T) {
	log := []sent{{0, 1}, {500, 2}, {1000, 1}, {1000, 1}, {1999, 1}}
	n, _ := maxInWindow(log, time.Millisecond) // W = 1000µs
	assert.Equal(t, 4, n, "(0, 1000] holds 2+1+1; (999, 1999] only 1+1+1")
	n, _ = maxInWindow(log, time.Microsecond)
	assert.Equal(t, 2, n)
}

var _ = errors.New

// sharedOrSkip returns the shared server, skipping Redis-only checks (MEMORY
// USAGE, real TTLs) when it is the miniredis fallback; never the case in CI,
// where redistest fails instead.
func sharedOrSkip(t *testing.T) *redistest.Server {
	srv := redistest.Shared(t)
	if !srv.Real {
		t.Skip("needs a real redis-server")
	}
	return srv
}
