package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
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

func usage(t *testing.T, s store.Store, key string, r contract.Request) contract.Usage {
	t.Helper()
	u, err := s.(contract.Inspector).Usage(ctx, key, r)
	require.NoError(t, err)
	return u
}

// usageCases run on every store (memory, redis-server, batched, miniredis,
// cluster) on a fake clock, with the same expectations.
var usageCases = []conformanceCase{
	{"empty key", func(t *testing.T, s store.Store, _ *fakeClock, key string) {
		u := usage(t, s, key, req(1, 0, lim(3, time.Second)))
		assert.Equal(t, contract.Usage{Limits: []contract.LimitUsage{{Limit: lim(3, time.Second)}}}, u)
	}},
	{"log: used, reserved, next", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 10*time.Second, lim(3, time.Second))
		for range 4 {
			require.True(t, reserve(t, s, key, r).Allowed)
		}
		u := usage(t, s, key, r)
		assert.Equal(t, []contract.LimitUsage{{Limit: lim(3, time.Second), Used: 3, Reserved: 1}}, u.Limits)
		assert.Equal(t, time.Second, u.Next)
		assert.Equal(t, contract.CauseLimit, u.NextCause)
		assert.Equal(t, 4, u.Entries)
		assert.Equal(t, time.Second, u.Last)
		clock.Advance(1200 * time.Millisecond)
		u = usage(t, s, key, r)
		assert.Equal(t, []contract.LimitUsage{{Limit: lim(3, time.Second), Used: 1}}, u.Limits)
		assert.Equal(t, time.Duration(0), u.Next)
		assert.Equal(t, contract.CauseNone, u.NextCause)
		assert.Equal(t, -200*time.Millisecond, u.Last)
	}},
	{"log: two limits, the second sets next", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, lim(2, time.Second), lim(3, 10*time.Second))
		for range 3 {
			require.True(t, reserve(t, s, key, r).Allowed)
			clock.Advance(1100 * time.Millisecond)
		}
		u := usage(t, s, key, r)
		assert.Equal(t, []contract.LimitUsage{{Limit: lim(2, time.Second), Used: 0}, {Limit: lim(3, 10*time.Second), Used: 3}}, u.Limits)
		assert.Equal(t, 10*time.Second-3300*time.Millisecond, u.Next)
		assert.Equal(t, contract.CauseLimit, u.NextCause)
		assert.Equal(t, 1, u.NextLimit)
	}},
	{"feedback: a learned margin, in Next too, and the learned pace's changes", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, lim(1, time.Second))
		require.True(t, reserve(t, s, key, r).Allowed)
		fb := s.(contract.Feedback)
		require.NoError(t, fb.Learn(ctx, key, contract.Learned{Margin: 100 * time.Millisecond, MarginTTL: time.Minute, MarginCap: time.Second}))
		clock.Advance(500 * time.Millisecond)
		u := usage(t, s, key, r)
		assert.Equal(t, 100*time.Millisecond, u.LearnedMargin)
		assert.Equal(t, time.Minute-500*time.Millisecond, u.LearnedMarginFor)
		assert.Equal(t, 500*time.Millisecond, u.LearnedMarginChanged)
		assert.Equal(t, 600*time.Millisecond, u.Next, "the window of 1 per second, 100ms wider")
		assert.Equal(t, contract.CauseLimit, u.NextCause)
		assert.False(t, u.PaceProbed)

		pace := func(per, probe time.Duration) contract.Learned {
			return contract.Learned{Pace: paced(10, per, 0), PaceTTL: time.Minute, Probe: probe}
		}
		require.NoError(t, fb.Learn(ctx, key, pace(time.Second, 0)))
		require.NoError(t, fb.Learn(ctx, key, pace(1100*time.Millisecond, 0))) // slowed
		clock.Advance(time.Second)
		u = usage(t, s, key, r)
		assert.Equal(t, contract.LearnedPace(110_000, 0), u.LearnedPace)
		assert.Equal(t, time.Second, u.LearnedPaceChanged)
		assert.False(t, u.PaceProbed, "not probed")
		require.NoError(t, fb.Learn(ctx, key, pace(time.Second, 500*time.Millisecond))) // sped up halfway
		clock.Advance(200 * time.Millisecond)
		u = usage(t, s, key, r)
		assert.Equal(t, contract.LearnedPace(105_000, 0), u.LearnedPace)
		assert.Equal(t, 200*time.Millisecond, u.LearnedPaceChanged)
		assert.True(t, u.PaceProbed)
		assert.Equal(t, 200*time.Millisecond, u.LearnedPaceProbed)
		clock.Advance(100 * time.Millisecond)
		require.NoError(t, fb.Learn(ctx, key, pace(1200*time.Millisecond, 0))) // slowed again
		u = usage(t, s, key, r)
		assert.Equal(t, time.Duration(0), u.LearnedPaceChanged)
		assert.Equal(t, 300*time.Millisecond, u.LearnedPaceProbed, "the probe before")

		clock.Advance(time.Minute)
		u = usage(t, s, key, r)
		assert.Zero(t, u.LearnedMargin, "ended with its TTL")
		assert.Zero(t, u.LearnedMarginChanged)
	}},
	{"feedback: pause, learned limit, budget", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, lim(5, 10*time.Second))
		require.True(t, reserve(t, s, key, r).Allowed)
		fb := s.(contract.Feedback)
		require.NoError(t, fb.Learn(ctx, key, contract.Learned{Pause: 2 * time.Second, Limit: lim(1, 4*time.Second), LimitTTL: time.Minute,
			Remaining: 7, Reset: 30 * time.Second}))
		clock.Advance(500 * time.Millisecond)
		u := usage(t, s, key, r)
		assert.Equal(t, 1500*time.Millisecond, u.Pause)
		assert.Equal(t, lim(1, 4*time.Second), u.Learned)
		assert.Equal(t, time.Minute-500*time.Millisecond, u.LearnedFor)
		assert.Equal(t, 7, u.Budget)
		assert.Equal(t, 29500*time.Millisecond, u.BudgetReset)
		// The learned 1 per 4s, from the entry at 0, beats the pause.
		assert.Equal(t, 3500*time.Millisecond, u.Next)
		assert.Equal(t, contract.CauseLearned, u.NextCause)
		assert.Equal(t, []contract.LimitUsage{{Limit: lim(5, 10*time.Second), Used: 1}}, u.Limits)
	}},
	{"fixed: the current window and later ones", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 10*time.Second, lim(2, time.Second))
		r.Algorithm = contract.FixedWindow
		for range 5 {
			require.True(t, reserve(t, s, key, r).Allowed)
		}
		clock.Advance(250 * time.Millisecond)
		u := usage(t, s, key, r)
		assert.Equal(t, []contract.LimitUsage{{Limit: lim(2, time.Second), Used: 2, Reserved: 3}}, u.Limits)
		assert.Equal(t, 1750*time.Millisecond, u.Next) // window 1 is full, window 2 holds one of two
		assert.Equal(t, contract.CauseLimit, u.NextCause)
		assert.Equal(t, contract.FixedWindow, u.Algorithm)
	}},
	{"counter: previous and current window", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 0, lim(4, time.Second))
		r.Algorithm = contract.SlidingCounter
		for range 3 {
			require.True(t, reserve(t, s, key, r).Allowed)
		}
		clock.Advance(1500 * time.Millisecond)
		require.True(t, reserve(t, s, key, r).Allowed)
		u := usage(t, s, key, r)
		assert.Equal(t, []contract.LimitUsage{{Limit: lim(4, time.Second), Used: 1, Previous: 3}}, u.Limits)
		assert.Equal(t, time.Duration(0), u.Next) // 3·0.5 + 1 + 1 <= 4
	}},
	{"buckets: the span ending with now's bucket", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		r := req(1, 10*time.Second, contract.Limit{N: 3, Per: time.Second, Precision: 250 * time.Millisecond})
		r.Algorithm = contract.Buckets
		for range 2 {
			require.True(t, reserve(t, s, key, r).Allowed)
		}
		clock.Advance(500 * time.Millisecond)
		for range 2 {
			require.True(t, reserve(t, s, key, r).Allowed) // the second waits for bucket 4
		}
		u := usage(t, s, key, r)
		assert.Equal(t, []contract.LimitUsage{{Limit: r.Limits[0], Used: 3, Reserved: 1}}, u.Limits)
		assert.Equal(t, 500*time.Millisecond, u.Next) // bucket 4: buckets 1..4 hold 2 of 3
		assert.Equal(t, contract.CauseLimit, u.NextCause)
	}},
	{"invalid requests are refused", func(t *testing.T, s store.Store, _ *fakeClock, key string) {
		_, err := s.(contract.Inspector).Usage(ctx, key, req(1, 0))
		assert.ErrorIs(t, err, contract.ErrInvalidRequest)
		_, err = s.(contract.Inspector).Usage(ctx, "", req(1, 0, lim(1, time.Second)))
		assert.ErrorIs(t, err, contract.ErrInvalidRequest)
	}},
}

func TestUsage(t *testing.T) { runCases(t, usageCases) }

// TestUsageDifferential drives the Memory store and each Redis store through
// the same random reservations, cancels, feedback and clock steps, and
// compares their Usage after every step; and checks Usage against the next
// reservation: a cost-1 request goes at Next (or, for the log without an
// allowance, at its newest entry if that is later). The log runs plain and
// with a paced limit (slow start or not), and learns paces.
func TestUsageDifferential(t *testing.T) {
	all := impls(t)
	variants := []struct {
		name string
		alg  contract.Algorithm
		pace bool
	}{{"log", contract.SlidingLog, false}, {"paced", contract.SlidingLog, true}, {"fixed", contract.FixedWindow, false},
		{"counter", contract.SlidingCounter, false}, {"buckets", contract.Buckets, false}}
	for _, im := range all[1:] {
		for _, v := range variants {
			alg := v.alg
			t.Run(im.name+"/"+v.name, func(t *testing.T) {
				// miniredis runs Lua in Go, slowly under -race: a shorter run.
				seeds, steps := uint64(2), 300
				if im.name == "miniredis" {
					seeds, steps = 1, 100
				}
				for seed := range seeds {
					clock := newFakeClock()
					mem := all[0].open(t, clock.Now)
					red := im.open(t, clock.Now)
					key := uniqueKey(t)
					rng := rand.New(rand.NewPCG(seed, 11))
					limits := []contract.Limit{lim(3+rng.IntN(5), time.Second), lim(10+rng.IntN(10), 5*time.Second)}
					if alg == contract.Buckets {
						limits[0].Precision, limits[1].Precision = 100*time.Millisecond, time.Second
					}
					if v.pace {
						p := paced(4+rng.IntN(8), time.Second, rng.IntN(3))
						p.SlowStart = rng.IntN(2) == 0
						limits = append(limits[:1], p, limits[1])
					}
					var granted []contract.Reservation
					for step := range steps {
						switch op := rng.IntN(12); op {
						case 0:
							l := contract.Learned{Pause: time.Duration(rng.IntN(1500)) * time.Millisecond}
							if rng.IntN(2) == 0 {
								l.Limit, l.LimitTTL = lim(1+rng.IntN(6), time.Duration(500+rng.IntN(4000))*time.Millisecond), time.Duration(1+rng.IntN(8))*time.Second
							}
							if rng.IntN(2) == 0 {
								l.Remaining, l.Reset = rng.IntN(10), time.Duration(rng.IntN(5000))*time.Millisecond
							}
							if alg == contract.SlidingLog && rng.IntN(2) == 0 {
								l.Pace, l.PaceTTL = paced(2+rng.IntN(8), time.Second, rng.IntN(2)), time.Duration(1+rng.IntN(8))*time.Second
							}
							require.NoError(t, mem.(contract.Feedback).Learn(ctx, key, l))
							require.NoError(t, red.(contract.Feedback).Learn(ctx, key, l))
						case 1:
							if len(granted) > 0 {
								i := rng.IntN(len(granted))
								require.NoError(t, mem.Cancel(ctx, granted[i]))
								require.NoError(t, red.Cancel(ctx, granted[i]))
								granted = append(granted[:i], granted[i+1:]...)
							}
						case 2, 3:
							clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
						default:
							r := req(1+rng.IntN(2), time.Duration(rng.IntN(4000))*time.Millisecond, limits...)
							r.Algorithm = alg
							r.MaxServerWait = 10 * time.Second
							a := reserve(t, mem, key, r)
							require.Equal(t, a, reserve(t, red, key, r), "step %d", step)
							if a.Allowed {
								granted = append(granted, a)
							}
						}
						r := req(1, time.Hour, limits...)
						r.Algorithm = alg
						um, ur := usage(t, mem, key, r), usage(t, red, key, r)
						// Entries counts what is not trimmed yet: Memory
						// trims eagerly, the script lazily.
						um.Entries, ur.Entries = min(um.Entries, 1), min(ur.Entries, 1)
						require.Equal(t, um, ur, "step %d", step)
						if step%10 == 0 && !um.Capped {
							// The next reservation of cost 1 goes where Usage said.
							a := reserve(t, mem, key, r)
							require.Equal(t, a, reserve(t, red, key, r), "step %d", step)
							require.True(t, a.Allowed)
							want := um.Next
							if alg == contract.SlidingLog && um.Entries > 0 && um.Last > want {
								want = um.Last
							}
							require.Equal(t, want, a.Delay, "step %d: %+v", step, um)
							granted = append(granted, a)
						}
						clock.Advance(time.Duration(rng.IntN(50)) * time.Millisecond)
					}
				}
			})
		}
	}
}

// TestUsageReadOnly: a Usage call leaves every Redis key of the rate key as
// it was, value and TTL, on a real server.
func TestUsageReadOnly(t *testing.T) {
	srv := redistest.Shared(t)
	if !srv.Real {
		t.Skip("needs redis-server (DUMP of miniredis differs)")
	}
	c := srv.Client(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	// The last SlidingLog runs with a paced limit and a learned pace.
	for i, alg := range []contract.Algorithm{contract.SlidingLog, contract.FixedWindow, contract.SlidingCounter, contract.Buckets, contract.SlidingLog} {
		key := uniqueKey(t)
		r := req(1, 10*time.Second, lim(3, time.Second), lim(10, time.Minute))
		r.Algorithm = alg
		if alg == contract.Buckets {
			r.Limits[0].Precision, r.Limits[1].Precision = 100*time.Millisecond, 10*time.Second
		}
		l := contract.Learned{Pause: time.Second, Remaining: 3, Reset: time.Minute}
		if i == 4 {
			r.Limits = append(r.Limits, paced(5, time.Second, 1))
			l.Pace, l.PaceTTL = paced(2, time.Second, 0), time.Minute
		}
		for range 20 {
			_, err := s.Reserve(ctx, key, r)
			require.NoError(t, err)
		}
		require.NoError(t, s.Learn(ctx, key, l))
		dump := func() string {
			var out string
			for _, k := range s.Keys(key) {
				d, _ := c.Dump(ctx, k).Result()
				// The absolute expiry (Redis 7.0): a TTL counts down, it does not.
				at, _ := c.Do(ctx, "pexpiretime", k).Int64()
				out += fmt.Sprintf("%s=%q expires=%d\n", k, d, at)
			}
			return out
		}
		before := dump()
		u, err := s.Usage(ctx, key, r)
		require.NoError(t, err)
		require.Equal(t, before, dump(), alg.String())
		assert.Positive(t, u.Limits[1].Used+u.Limits[1].Reserved, alg.String())
	}
}

// The Usage errors carry no key material beyond what was asked for.
func TestUsageErrorsAreTyped(t *testing.T) {
	m, err := memstore.NewMemory()
	require.NoError(t, err)
	_, err = m.Usage(ctx, "k", contract.Request{})
	require.True(t, errors.Is(err, contract.ErrInvalidRequest))
}

// Delete removes the log, the counters and the feedback of a key in one DEL
// (one slot: it runs on the cluster too), and nothing of another key.
func TestRedisDelete(t *testing.T) {
	for _, im := range impls(t)[1:] {
		t.Run(im.name, func(t *testing.T) {
			s := im.open(t, nil).(*redisstore.Redis)
			key, other := uniqueKey(t), uniqueKey(t)
			for _, k := range []string{key, other} {
				for _, alg := range []contract.Algorithm{contract.SlidingLog, contract.FixedWindow} {
					r := req(1, 0, lim(3, time.Minute))
					r.Algorithm = alg
					reserve(t, s, k, r)
				}
				require.NoError(t, s.Pause(ctx, k, time.Minute))
			}
			n, err := s.Delete(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, int64(3), n)
			u := usage(t, s, key, req(1, 0, lim(3, time.Minute)))
			assert.Zero(t, u.Limits[0].Used)
			assert.Zero(t, u.Pause)
			u = usage(t, s, other, req(1, 0, lim(3, time.Minute)))
			assert.Equal(t, 1, u.Limits[0].Used)
			assert.Positive(t, u.Pause)
		})
	}
}
