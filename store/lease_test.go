package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// capped is a request of cost 1 under limit, with a cap of n in flight and
// leases of dur.
func capped(n int, dur, maxWait time.Duration, limits ...contract.Limit) contract.Request {
	if len(limits) == 0 {
		limits = []contract.Limit{lim(1000, time.Second)}
	}
	return contract.Request{Limits: limits, Cost: 1, MaxWait: maxWait, InFlight: n, LeaseFor: dur}
}

func leases(t *testing.T, s store.Store) contract.Leases {
	t.Helper()
	l, ok := s.(contract.Leases)
	require.True(t, ok, "%T implements contract.Leases", s)
	return l
}

// TestLeaseConformance runs the in-flight cases on every store.
func TestLeaseConformance(t *testing.T) { runCases(t, leaseCases) }

var leaseCases = []conformanceCase{
	{"N leases, then refused in flight until one is released", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := capped(2, 10*time.Second, 0)
		a := reserve(t, s, key, r)
		require.True(t, a.Allowed)
		assert.True(t, a.Lease.Held())
		clock.Advance(time.Second)
		b := reserve(t, s, key, r)
		require.True(t, b.Allowed)
		c := reserve(t, s, key, r)
		assert.False(t, c.Allowed)
		assert.Equal(t, contract.CauseInFlight, c.Cause)
		assert.Equal(t, time.Millisecond, c.RetryAfter, "a lease was taken just now: retry soon (at least 1ms)")
		assert.False(t, c.Lease.Held() || c.Lease.Queued(), "no wait: no ticket")
		require.NoError(t, leases(t, s).Release(ctx, a.Lease))
		d := reserve(t, s, key, r)
		assert.True(t, d.Allowed, "a release frees a lease at once")
		require.NoError(t, leases(t, s).Release(ctx, a.Lease), "releasing twice is harmless")
		assert.False(t, reserve(t, s, key, r).Allowed, "and frees nothing more")
	}},
	{"a refusal in flight retries after as long as since a lease was last taken", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		ls := leases(t, s)
		r := capped(2, 10*time.Second, 0)
		a := reserve(t, s, key, r)
		clock.Advance(100 * time.Millisecond)
		b := reserve(t, s, key, r)
		clock.Advance(300 * time.Millisecond)
		res := reserve(t, s, key, r)
		require.Equal(t, contract.CauseInFlight, res.Cause)
		assert.Equal(t, 300*time.Millisecond, res.RetryAfter, "the newest lease was taken 300ms ago: as long again")
		w := reserve(t, s, key, capped(2, 10*time.Second, time.Minute))
		require.True(t, w.Lease.Queued())
		res = reserve(t, s, key, r)
		assert.Equal(t, 600*time.Millisecond, res.RetryAfter, "one waiter ahead: two leases to free")
		clock.Advance(400 * time.Millisecond)
		require.NoError(t, ls.Release(ctx, a.Lease)) // handed to the waiter
		res = reserve(t, s, key, r)
		require.Equal(t, contract.CauseInFlight, res.Cause)
		assert.Equal(t, time.Millisecond, res.RetryAfter, "a lease changed hands just now")
		clock.Advance(9 * time.Second)
		res = reserve(t, s, key, r)
		require.Equal(t, contract.CauseInFlight, res.Cause)
		assert.Equal(t, 300*time.Millisecond, res.RetryAfter, "at most until the earliest lease expires (b's, taken at 100ms, at 10.1s)")
		require.NoError(t, ls.Release(ctx, b.Lease))
		require.NoError(t, ls.Release(ctx, w.Lease))
	}},
	{"a cap in flight with more keys: the cap on the own key, each key's limits, one call", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := tagged(key, "token", "token2", "app")
		r := func() contract.Request {
			r := capped(2, time.Hour, 0, lim(100, time.Second))
			r.Also = []contract.Part{{Key: k[2], Limits: []contract.Limit{lim(3, time.Hour)}}}
			return r
		}
		a := reserve(t, s, k[0], r())
		require.True(t, a.Allowed)
		require.True(t, a.Lease.Held())
		b := reserve(t, s, k[0], r())
		require.True(t, b.Allowed)
		c := reserve(t, s, k[0], r())
		assert.Equal(t, contract.CauseInFlight, c.Cause, "the cap is on the request's own key")
		d := reserve(t, s, k[1], r())
		require.True(t, d.Allowed, "another token has its own cap")
		e := reserve(t, s, k[1], r())
		require.False(t, e.Allowed)
		assert.Equal(t, contract.CauseLimit, e.Cause, "the app's limit: 3 sent, the refused in flight not counted")
		assert.Equal(t, 1, e.Part)
		require.NoError(t, leases(t, s).Release(ctx, a.Lease))
		assert.Equal(t, contract.CauseLimit, reserve(t, s, k[0], r()).Cause, "a lease free, the app's limit refuses; no lease taken")
		require.NoError(t, leases(t, s).Release(ctx, d.Lease))
		require.NoError(t, s.Cancel(ctx, b))
		require.NoError(t, leases(t, s).Release(ctx, b.Lease))
		f := reserve(t, s, k[1], r())
		require.True(t, f.Allowed, "a cancel gives the app's unit back")
		assert.True(t, f.Lease.Held())
		p := capped(1, time.Hour, 0, contract.Limit{N: 10, Per: time.Second, Paced: true, Burst: 2})
		p.Also = []contract.Part{{Key: k[2] + "p", Limits: []contract.Limit{lim(5, time.Hour)}}}
		pk := tagged(key, "paced")[0]
		require.True(t, reserve(t, s, pk, p).Allowed, "a paced limit with more keys takes a lease")
		assert.Equal(t, contract.CauseInFlight, reserve(t, s, pk, p).Cause)
	}},
	{"a reservation the rate refuses takes no lease", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := capped(2, time.Hour, 0, lim(1, time.Second))
		require.True(t, reserve(t, s, key, r).Allowed)
		refused := reserve(t, s, key, r)
		require.False(t, refused.Allowed)
		assert.Equal(t, contract.CauseLimit, refused.Cause)
		clock.Advance(time.Second)
		require.True(t, reserve(t, s, key, r).Allowed, "the refusal held no lease")
		clock.Advance(time.Second)
		res := reserve(t, s, key, r)
		assert.False(t, res.Allowed)
		assert.Equal(t, contract.CauseInFlight, res.Cause)
	}},
	{"a lease refusal records nothing in the log", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := capped(1, time.Hour, 0, lim(2, time.Hour))
		a := reserve(t, s, key, r)
		for range 5 {
			require.Equal(t, contract.CauseInFlight, reserve(t, s, key, r).Cause)
		}
		require.NoError(t, leases(t, s).Release(ctx, a.Lease))
		b := reserve(t, s, key, r)
		require.True(t, b.Allowed, "the log holds one unit of two")
		require.NoError(t, leases(t, s).Release(ctx, b.Lease))
		assert.Equal(t, contract.CauseLimit, reserve(t, s, key, r).Cause, "and now two")
	}},
	{"an expired lease is reclaimed: a holder that died", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := capped(1, time.Second, 0)
		a := reserve(t, s, key, r)
		require.True(t, a.Allowed)
		clock.Advance(999 * time.Millisecond)
		res := reserve(t, s, key, r)
		assert.Equal(t, contract.CauseInFlight, res.Cause)
		assert.Equal(t, time.Millisecond, res.RetryAfter)
		clock.Advance(time.Millisecond)
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.ErrorIs(t, leases(t, s).Renew(ctx, a.Lease), contract.ErrLeaseExpired)
	}},
	{"renew extends a held lease by its duration", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := capped(1, time.Second, 0)
		a := reserve(t, s, key, r)
		clock.Advance(800 * time.Millisecond)
		require.NoError(t, leases(t, s).Renew(ctx, a.Lease))
		clock.Advance(800 * time.Millisecond)
		res := reserve(t, s, key, r)
		assert.Equal(t, contract.CauseInFlight, res.Cause)
		assert.Equal(t, 200*time.Millisecond, res.RetryAfter)
		require.NoError(t, leases(t, s).Renew(ctx, a.Lease))
	}},
	{"waiters are served in order; a newcomer never passes them", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		ls := leases(t, s)
		a := reserve(t, s, key, capped(1, time.Hour, 0))
		w1 := reserve(t, s, key, capped(1, time.Hour, time.Minute))
		w2 := reserve(t, s, key, capped(1, time.Hour, time.Minute))
		for _, w := range []contract.Reservation{w1, w2} {
			require.False(t, w.Allowed)
			require.Equal(t, contract.CauseInFlight, w.Cause)
			require.True(t, w.Lease.Queued())
		}
		require.NoError(t, ls.Release(ctx, a.Lease))
		assert.Equal(t, contract.CauseInFlight, reserve(t, s, key, capped(1, time.Hour, 0)).Cause, "the freed lease went to the first waiter")
		got, err := ls.Await(ctx, w1.Lease)
		require.NoError(t, err)
		require.True(t, got.Held())
		held := capped(1, time.Hour, time.Minute)
		held.Held = got
		res := reserve(t, s, key, held)
		require.True(t, res.Allowed, "the handed lease reserves")
		assert.Equal(t, contract.CauseNone, res.Cause)
		// The second waiter gets it when the first is done.
		done := make(chan contract.Lease)
		go func() {
			l, err := ls.Await(ctx, w2.Lease)
			assert.NoError(t, err)
			done <- l
		}()
		require.NoError(t, ls.Release(ctx, res.Lease))
		assert.True(t, (<-done).Held())
	}},
	{"a wait that ends leaves the queue", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		ls := leases(t, s)
		a := reserve(t, s, key, capped(1, time.Hour, 0))
		w := reserve(t, s, key, capped(1, time.Hour, 30*time.Millisecond))
		require.True(t, w.Lease.Queued())
		got, err := ls.Await(ctx, w.Lease)
		require.NoError(t, err)
		assert.False(t, got.Held())
		require.NoError(t, ls.Release(ctx, a.Lease))
		assert.True(t, reserve(t, s, key, capped(1, time.Hour, 0)).Allowed, "no waiter left to serve")
	}},
	{"a waiter whose context ends leaves the queue", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		ls := leases(t, s)
		a := reserve(t, s, key, capped(1, time.Hour, 0))
		w := reserve(t, s, key, capped(1, time.Hour, time.Minute))
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		_, err := ls.Await(cctx, w.Lease)
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, ls.Release(ctx, a.Lease))
		// The Redis store leaves from its waiting goroutine, within a second.
		require.Eventually(t, func() bool {
			res := reserve(t, s, key, capped(1, time.Hour, 0))
			if res.Allowed {
				require.NoError(t, ls.Release(ctx, res.Lease))
			}
			return res.Allowed
		}, 5*time.Second, 20*time.Millisecond)
	}},
	{"an expired lease is handed to the waiter", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		ls := leases(t, s)
		reserve(t, s, key, capped(1, time.Second, 0)) // never released
		w := reserve(t, s, key, capped(1, time.Second, time.Minute))
		clock.Advance(time.Second)
		got, err := ls.Await(ctx, w.Lease)
		require.NoError(t, err)
		assert.True(t, got.Held())
	}},
	{"a held lease that expired is taken anew, or waited for", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		a := reserve(t, s, key, capped(1, time.Second, 0))
		clock.Advance(time.Second)
		b := reserve(t, s, key, capped(1, time.Second, 0))
		require.True(t, b.Allowed)
		r := capped(1, time.Second, 0)
		r.Held = a.Lease
		assert.Equal(t, contract.CauseInFlight, reserve(t, s, key, r).Cause, "a's lease expired and b holds the only one")
	}},
	{"invalid in-flight fields are refused", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		for _, r := range []contract.Request{
			capped(-1, time.Second, 0), capped(1, 0, 0), capped(1, 25*time.Hour, 0),
			{Limits: []contract.Limit{lim(1, time.Second)}, Cost: 1, LeaseFor: time.Second},
		} {
			_, err := s.Reserve(ctx, key, r)
			assert.ErrorIs(t, err, contract.ErrInvalidRequest, "%+v", r)
			assert.ErrorIs(t, r.Validate(key), contract.ErrInvalidRequest)
		}
	}},
	{"every algorithm takes a lease", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		for _, alg := range []contract.Algorithm{contract.SlidingLog, contract.FixedWindow, contract.SlidingCounter, contract.Buckets} {
			r := capped(1, time.Hour, 0, lim(10, time.Second))
			r.Algorithm = alg
			k := key + alg.String()
			a := reserve(t, s, k, r)
			require.True(t, a.Allowed, alg.String())
			assert.Equal(t, contract.CauseInFlight, reserve(t, s, k, r).Cause, alg.String())
			require.NoError(t, leases(t, s).Release(ctx, a.Lease))
			assert.True(t, reserve(t, s, k, r).Allowed, alg.String())
		}
		p := capped(1, time.Hour, 0, contract.Limit{N: 10, Per: time.Second, Paced: true, Burst: 2, SlowStart: true})
		assert.True(t, reserve(t, s, key+"paced", p).Allowed)
		assert.Equal(t, contract.CauseInFlight, reserve(t, s, key+"paced", p).Cause)
	}},
}

// TestLeaseProperty is the cap itself: workers take leases (waiting in the
// queue or not), hold them and give them back, and some die holding theirs,
// on a clock that moves so that leases expire. At no time do the live
// holders plus the dead ones whose leases cannot have expired yet exceed the
// cap.
func TestLeaseProperty(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for seed := range uint64(2) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runLeaseProperty(t, im, seed) })
			}
		})
	}
}

func runLeaseProperty(t *testing.T, im impl, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	limit := 2 + rng.IntN(4)
	const dur = 50 * time.Millisecond
	// Memory runs on a fake clock that moves while the workers reserve;
	// Redis on its own TIME, which the test reads as time.Now (the same
	// host's clock). (With WithClientTime, callers racing with stale clocks
	// could count a lease as expired early, as its documentation says.)
	clock := newFakeClock()
	var s store.Store
	now := time.Now
	if im.name == "memory" {
		s, now = im.open(t, clock.Now), clock.Now
	} else {
		s = im.open(t, nil)
	}
	ls := leases(t, s)
	key := uniqueKey(t)

	// The leases surely held at a moment: a holder's lease was taken at
	// or after the moment it asked, so it is held at least until that
	// moment plus dur, whether its holder lives on or died. A live holder
	// that stalls longer (a loaded machine: dur is short here) may have
	// lost its lease to another, as the store allows; it is not counted
	// past that bound.
	var mu sync.Mutex
	most := 0
	held := map[int]int64{} // holder -> the earliest its lease may expire (µs)
	var granted, died, waited, expired atomic.Int64
	check := func() {
		mu.Lock()
		defer mu.Unlock()
		now := now().UnixMicro()
		n := 0
		for _, e := range held {
			if e > now {
				n++
			}
		}
		most = max(most, n)
		if n > limit {
			t.Errorf("%d leases surely held under a cap of %d", n, limit)
		}
	}
	hold := func(id int, until int64) {
		mu.Lock()
		held[id] = until
		mu.Unlock()
		check()
	}
	drop := func(id int) {
		mu.Lock()
		delete(held, id)
		mu.Unlock()
	}
	// The clock moves while the workers reserve. A machine loaded by other
	// work may keep the workers from ever filling the cap at once; then
	// they go another round (the property holds in every round).
	stop := clock.moving(seed, 400*time.Microsecond, 100*time.Microsecond)
	for round := 0; round < 4 && (round == 0 || most < limit); round++ {
		runLeaseRound(t, s, ls, key, limit, dur, seed, round, now, hold, drop, &granted, &died, &waited, &expired)
	}
	stop()
	t.Logf("cap %d: %d granted, %d after a wait in the queue (%d more handed a lease that expired before use), %d died holding; most in flight %d",
		limit, granted.Load(), waited.Load(), expired.Load(), died.Load(), most)
	assert.Equal(t, limit, most, "the load never filled the cap; the test proves nothing")
	assert.Positive(t, waited.Load(), "no waiter was ever served")
}

// runLeaseRound is one round of runLeaseProperty: 12 workers reserving,
// holding, dying and releasing leases under the cap.
func runLeaseRound(t *testing.T, s store.Store, ls contract.Leases, key string, limit int, dur time.Duration, seed uint64, round int,
	now func() time.Time, hold func(int, int64), drop func(int), granted, died, waited, expired *atomic.Int64) {
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(round*100+w)))
			for i := range 30 {
				id := round*100_000 + w*1000 + i
				rq := capped(limit, dur, time.Duration(r.IntN(3))*20*time.Millisecond)
				before := now().UnixMicro()
				res, err := s.Reserve(ctx, key, rq)
				if !assert.NoError(t, err) {
					return
				}
				if res.Lease.Queued() {
					l, err := ls.Await(ctx, res.Lease)
					if !assert.NoError(t, err) || !l.Held() {
						continue
					}
					waited.Add(1)
					rq.Held = l
					before = now().UnixMicro() // the reservation renews it
					if res, err = s.Reserve(ctx, key, rq); !assert.NoError(t, err) {
						return
					}
					if !res.Allowed {
						// Handed, then expired before this call (a slow
						// store: LeaseFor is short here): queued anew.
						expired.Add(1)
						assert.Equal(t, contract.CauseInFlight, res.Cause)
						assert.NoError(t, ls.Release(ctx, res.Lease))
						continue
					}
				}
				if !res.Allowed {
					continue
				}
				granted.Add(1)
				if r.IntN(8) == 0 {
					// Dies holding it: counted until it may have expired
					// (the lease was taken at or after before).
					died.Add(1)
					hold(id, before+dur.Microseconds())
					continue
				}
				hold(id, before+dur.Microseconds())
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				drop(id)
				assert.NoError(t, ls.Release(ctx, res.Lease))
			}
		}()
	}
	wg.Wait()
}

var _ = errors.Is
