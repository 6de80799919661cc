package store_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// tagged returns keys that share the hash tag of key, so that the cases run
// on the Cluster store too.
func tagged(key string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "{" + key + "}" + n
	}
	return out
}

// two is a request of cost 1 under the token's own limit, 2 per second, and
// the app's, 3 per second.
func two(token, app string, maxWait time.Duration) contract.Request {
	r := req(1, maxWait, lim(2, time.Second))
	r.Also = []contract.Part{{Key: app, Limits: []contract.Limit{lim(3, time.Second)}}}
	return r
}

// TestConformanceMultiKey runs the cases of a request with several keys on
// every store.
func TestConformanceMultiKey(t *testing.T) { runCases(t, multiKeyCases) }

var multiKeyCases = []conformanceCase{
	{"each key's limit holds; a refusal says which key and records in none", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := tagged(key, "a", "b", "app")
		a, b, app := k[0], k[1], k[2]
		require.True(t, reserve(t, s, a, two(a, app, 0)).Allowed)
		require.True(t, reserve(t, s, a, two(a, app, 0)).Allowed)
		clock.Advance(100 * time.Millisecond)
		res := reserve(t, s, a, two(a, app, 0))
		require.False(t, res.Allowed, "token a's own limit")
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 0, res.Part)
		assert.Equal(t, 900*time.Millisecond, res.RetryAfter)
		require.True(t, reserve(t, s, b, two(b, app, 0)).Allowed, "the app's third")
		res = reserve(t, s, b, two(b, app, 0))
		require.False(t, res.Allowed, "the app's limit")
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 1, res.Part)
		assert.Equal(t, 0, res.Limit)
		assert.Equal(t, 900*time.Millisecond, res.RetryAfter)
		// The refusals recorded nothing: b alone has one free unit of its
		// own, and a's own log still holds two.
		single := req(1, 0, lim(2, time.Second))
		assert.True(t, reserve(t, s, b, single).Allowed)
		assert.False(t, reserve(t, s, b, single).Allowed)
		assert.False(t, reserve(t, s, a, single).Allowed)
	}},
	{"the slot is the latest any key allows, recorded in all", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := tagged(key, "a", "b", "app")
		a, b, app := k[0], k[1], k[2]
		var delays []time.Duration
		for _, tok := range []string{a, a, a, b, b} {
			res := reserve(t, s, tok, two(tok, app, time.Hour))
			require.True(t, res.Allowed)
			delays = append(delays, res.Delay)
		}
		// a: 0, 0, then its own third at 1s; b: the app's fourth waits for
		// the app's first + 1s, its fifth for the second + 1s, never before
		// the app's last entry (1s).
		assert.Equal(t, []time.Duration{0, 0, time.Second, time.Second, time.Second}, delays)
		res := reserve(t, s, b, two(b, app, time.Hour))
		assert.Equal(t, 2*time.Second, res.Delay, "b's own two are at 1s")
		assert.Equal(t, contract.CauseLimit, res.Cause)
	}},
	{"cancel gives the units back under every key", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := tagged(key, "a", "b", "app")
		a, b, app := k[0], k[1], k[2]
		reserve(t, s, a, two(a, app, 0))
		reserve(t, s, a, two(a, app, 0))
		res := reserve(t, s, b, two(b, app, 0))
		require.True(t, res.Allowed)
		require.False(t, reserve(t, s, b, two(b, app, 0)).Allowed)
		require.NoError(t, s.Cancel(ctx, res))
		assert.True(t, reserve(t, s, b, two(b, app, 0)).Allowed, "the app's unit came back")
		r := two(b, app, 0)
		r.Also[0].Limits = []contract.Limit{lim(4, time.Second)}
		res = reserve(t, s, b, r)
		assert.True(t, res.Allowed, "b's own log holds one entry, not two: the cancel removed one")
	}},
	{"with an allowance every key records the same entry, after every last one", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := tagged(key, "a", "b", "app")
		a, b, app := k[0], k[1], k[2]
		r := two(a, app, time.Hour)
		r.Allowance = 300 * time.Millisecond
		first := reserve(t, s, a, r)
		require.True(t, first.Allowed)
		assert.Equal(t, first.Slot+300_000, first.Entry)
		clock.Advance(100 * time.Millisecond)
		rb := two(b, app, time.Hour)
		rb.Allowance = 50 * time.Millisecond
		res := reserve(t, s, b, rb)
		require.True(t, res.Allowed)
		assert.Equal(t, time.Duration(0), res.Delay, "an allowance does not hold the next one back")
		assert.Equal(t, first.Entry, res.Entry, "never before the app's last entry")
		require.NoError(t, s.Cancel(ctx, res))
		require.NoError(t, s.Cancel(ctx, first))
		// Both gone from every log: the app admits three at once again.
		for i := range 3 {
			tok := tagged(key, fmt.Sprint("c", i))[0]
			assert.True(t, reserve(t, s, tok, two(tok, app, 0)).Allowed, "request %d", i)
		}
	}},
	{"a paced own limit with a windowed part", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := tagged(key, "a", "app")
		a, app := k[0], k[1]
		r := contract.Request{Cost: 1, MaxWait: time.Hour, Limits: []contract.Limit{{N: 10, Per: time.Second, Paced: true}},
			Also: []contract.Part{{Key: app, Limits: []contract.Limit{lim(2, time.Second)}}}}
		var delays []time.Duration
		var last contract.Reservation
		for range 3 {
			last = reserve(t, s, a, r)
			require.True(t, last.Allowed)
			delays = append(delays, last.Delay)
		}
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, time.Second}, delays)
		assert.Equal(t, 1, last.Part, "the app set the third")
		require.NoError(t, s.Cancel(ctx, last))
		assert.Equal(t, time.Second, reserve(t, s, a, r).Delay)
	}},
}

// TestMultiKeyInvalid: what no store can grant is refused before any call.
func TestMultiKeyInvalid(t *testing.T) {
	t.Parallel()
	ok := contract.Request{Cost: 2, Limits: []contract.Limit{lim(5, time.Second)}}
	part := func(key string, l ...contract.Limit) []contract.Part { return []contract.Part{{Key: key, Limits: l}} }
	for name, r := range map[string]contract.Request{
		"empty Also":         {Cost: 1, Limits: ok.Limits, Also: []contract.Part{}},
		"empty key":          {Cost: 1, Limits: ok.Limits, Also: part("", lim(1, time.Second))},
		"own key again":      {Cost: 1, Limits: ok.Limits, Also: part("k", lim(1, time.Second))},
		"no limits":          {Cost: 1, Limits: ok.Limits, Also: part("app")},
		"cost above N":       {Cost: 2, Limits: ok.Limits, Also: part("app", lim(1, time.Second))},
		"paced part":         {Cost: 1, Limits: ok.Limits, Also: part("app", contract.Limit{N: 1, Per: time.Second, Paced: true})},
		"counting":           {Cost: 1, Limits: ok.Limits, Algorithm: contract.FixedWindow, Also: part("app", lim(1, time.Second))},
		"the same key twice": {Cost: 1, Limits: ok.Limits, Also: append(part("app", lim(1, time.Second)), part("app", lim(2, time.Second))...)},
	} {
		err := r.Validate("k")
		assert.ErrorIs(t, err, contract.ErrInvalidRequest, name)
	}
	ok.Also = part("app", lim(2, time.Second))
	assert.NoError(t, ok.Validate("k"))
}

// TestMultiKeyPropertyAllStores is the guarantee with several keys: workers
// reserve over random, overlapping sets of keys, each key with its own
// random limits, with random costs and allowances, and some cancel; the send
// times recorded never put more than N units in any window of any limit of
// any key.
func TestMultiKeyProperty(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for seed := range uint64(3) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					runMultiKeyProperty(t, im, seed, tagged)
				})
			}
		})
	}
}

// runMultiKeyProperty runs the property on im with keys named by names
// (tagged: one slot; spread: one slot each on a Cluster). A run on a real
// server's clock may fill no window (the workers' pace depends on the
// machine): the check has teeth only when one is full, so such a run is
// made again, on fresh keys, up to three times.
func runMultiKeyProperty(t *testing.T, im impl, seed uint64, name func(string, ...string) []string) {
	full := 0
	for attempt := 0; attempt < 3 && full == 0; attempt++ {
		full = multiKeyPropertyOnce(t, im, seed, name)
	}
	assert.Positive(t, full, "no window of any key was ever full in three runs: the test proves nothing")
}

// multiKeyPropertyOnce runs the property once and returns how many windows
// it found full; a window holding more than its N fails the test.
func multiKeyPropertyOnce(t *testing.T, im impl, seed uint64, name func(string, ...string) []string) int {
	rng := rand.New(rand.NewPCG(seed, 7))
	const keys, maxCost = 4, 3
	base := uniqueKey(t)
	names := name(base, "k0", "k1", "k2", "k3")
	limits := make([][]contract.Limit, keys) // a key is always reserved with the same limits
	for k := range limits {
		limits[k] = make([]contract.Limit, 1+rng.IntN(2))
		for i := range limits[k] {
			limits[k][i] = lim(maxCost+rng.IntN(12), time.Duration(10+rng.IntN(1500))*time.Millisecond)
		}
	}
	// Under each key, a unit counted when the key is another's part
	// (Part.Key with Part.Unit): up to 8 units a request, some refunded.
	const maxUnits = 8
	units := make([]contract.Limit, keys)
	for k := range units {
		units[k] = lim(maxUnits+rng.IntN(4), time.Duration(100+rng.IntN(1500))*time.Millisecond)
	}
	t.Logf("seed %d limits %v units %v", seed, limits, units)
	clock := newFakeClock()
	var s store.Store
	if im.name == "memory" {
		s = im.open(t, clock.Now)
	} else {
		s = im.open(t, nil)
	}
	allowances := []time.Duration{0, 0, 0, time.Millisecond, 5 * time.Millisecond, 30 * time.Millisecond, 0, 100 * time.Millisecond}

	var mu sync.Mutex
	logs := make([][]sent, keys)
	ulogs := make([][]sent, keys) // the units sent under each key, at their actual cost
	var wg sync.WaitGroup
	const workers, each = 12, 40
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for range each {
				// A random primary and a random subset of the others.
				set := r.Perm(keys)[:1+r.IntN(keys)]
				cost := 1 + r.IntN(maxCost)
				rq := req(cost, time.Duration(r.IntN(2000))*time.Millisecond, limits[set[0]]...)
				rq.Allowance = allowances[w%len(allowances)]
				for _, k := range set[1:] {
					rq.Also = append(rq.Also, contract.Part{Key: names[k], Limits: limits[k]})
				}
				ucost := make([]int, keys)
				for _, k := range set[1:] {
					if r.IntN(2) == 0 {
						ucost[k] = r.IntN(maxUnits + 1)
						rq.Also = append(rq.Also, contract.Part{Key: names[k], Unit: "u", Cost: ucost[k], Limits: []contract.Limit{units[k]}})
					} else {
						ucost[k] = -1
					}
				}
				res, err := s.Reserve(ctx, names[set[0]], rq)
				if !assert.NoError(t, err) {
					return
				}
				if !res.Allowed {
					continue
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
				if len(res.Units) > 0 && r.IntN(3) == 0 {
					// A refund: the final costs, never above what was
					// recorded when later requests were placed, must
					// keep every window too.
					actual := make([]int64, len(res.Units))
					for i, u := range res.Units {
						actual[i] = r.Int64N(u.Cost + 1)
						for k := range names {
							if names[k] == u.Key {
								ucost[k] = int(actual[i])
							}
						}
					}
					assert.NoError(t, s.Settle(ctx, res, actual))
				}
				mu.Lock()
				for _, k := range set {
					logs[k] = append(logs[k], sent{at, cost})
					if ucost[k] >= 0 && k != set[0] {
						ulogs[k] = append(ulogs[k], sent{at, ucost[k]})
					}
				}
				mu.Unlock()
			}
		}()
	}
	// The clock moves while the workers reserve.
	stop := clock.moving(seed, 20_000*time.Microsecond, 50*time.Microsecond)
	wg.Wait()
	stop()
	full := 0
	for k := range keys {
		require.NotEmpty(t, logs[k], "key %d", k)
		for _, l := range limits[k] {
			n, at := maxInWindow(logs[k], l.Per)
			if n > l.N {
				t.Fatalf("key %d limit %s: %d units in the window ending at %d", k, l, n, at)
			}
			if n == l.N {
				full++
			}
		}
		n, at := maxInWindow(ulogs[k], units[k].Per)
		if n > units[k].N {
			t.Fatalf("key %d unit limit %s: %d units in the window ending at %d", k, units[k], n, at)
		}
		if n == units[k].N {
			full++
		}
	}
	return full
}

// TestRedisMultiKeyPartHeals: a part's log in a wrong state (another type,
// an entry that is not a number, one far in the future) is repaired with the
// request's own key, and the request is answered, recorded in both logs.
func TestRedisMultiKeyPartHeals(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	for name, spoil := range map[string]func(lk string) error{
		"another type": func(lk string) error { return c.Set(ctx, lk, "x", 0).Err() },
		"not a number": func(lk string) error { return c.RPush(ctx, lk, "x").Err() },
		"far future": func(lk string) error {
			return c.RPush(ctx, lk, strconv.FormatInt(time.Now().Add(48*time.Hour).UnixMicro(), 10)).Err()
		},
	} {
		t.Run(name, func(t *testing.T) {
			k := tagged(uniqueKey(t), "a", "app")
			r := two(k[0], k[1], time.Second)
			require.True(t, reserve(t, s, k[0], r).Allowed)
			require.NoError(t, spoil(s.RedisKey(k[1])))
			res := reserve(t, s, k[0], r)
			require.True(t, res.Allowed)
			assert.Less(t, res.Delay, time.Second, "not held back by the bad entry")
			assert.Equal(t, "list", c.Type(ctx, s.RedisKey(k[1])).Val())
			assert.Equal(t, strconv.FormatInt(res.Entry, 10), c.LIndex(ctx, s.RedisKey(k[1]), -1).Val(), "recorded in the app's log")
			for _, e := range c.LRange(ctx, s.RedisKey(k[1]), 0, -1).Val() {
				v, err := strconv.ParseInt(e, 10, 64)
				require.NoError(t, err, "entry %q", e)
				assert.Less(t, v, time.Now().Add(time.Hour).UnixMicro())
			}
		})
	}
}

// TestMultiKeyKeepsTheMark: a key that is one request's own, paused
// by the upstream, and another's extra key: recording and cancelling under
// it as an extra key keeps its pause in force for its own requests.
func TestMultiKeyKeepsTheMark(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			clock := newFakeClock()
			s := im.open(t, clock.Now)
			fb, ok := s.(contract.Feedback)
			require.True(t, ok)
			k := tagged(uniqueKey(t), "app", "a")
			app, a := k[0], k[1]
			own := req(1, 0, lim(100, time.Second))
			require.True(t, reserve(t, s, app, own).Allowed)
			require.NoError(t, fb.Pause(ctx, app, time.Minute))
			r := two(a, app, 0)
			r.Also[0].Limits = own.Limits
			res := reserve(t, s, a, r)
			require.True(t, res.Allowed, "the extra key reads no feedback")
			refused := reserve(t, s, app, own)
			assert.False(t, refused.Allowed, "the pause still holds the app's own requests")
			assert.Equal(t, contract.CauseUpstream, refused.Cause)
			require.NoError(t, s.Cancel(ctx, res))
			assert.Equal(t, contract.CauseUpstream, reserve(t, s, app, own).Cause, "and after a cancel")
		})
	}
}
