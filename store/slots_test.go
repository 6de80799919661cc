package store_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// spread returns keys that do not share a hash tag: on the Cluster store
// each lies in a slot of its own (one call per slot), elsewhere nothing
// changes.
func spread(key string, names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = key + "-" + n
	}
	return out
}

// TestConformanceSlots runs the cases of a request whose keys share no hash
// tag on every store: the same answers as with one tag.
func TestConformanceSlots(t *testing.T) { runCases(t, slotCases) }

var slotCases = []conformanceCase{
	{"each key's limit holds; a refusal says which key and records in none", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := spread(key, "a", "b", "app")
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
		single := req(1, 0, lim(2, time.Second))
		assert.True(t, reserve(t, s, b, single).Allowed)
		assert.False(t, reserve(t, s, b, single).Allowed)
		assert.False(t, reserve(t, s, a, single).Allowed)
	}},
	{"the slot is the latest any key allows, recorded in all", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := spread(key, "a", "b", "app")
		a, b, app := k[0], k[1], k[2]
		var delays []time.Duration
		for _, tok := range []string{a, a, a, b, b} {
			res := reserve(t, s, tok, two(tok, app, time.Hour))
			require.True(t, res.Allowed)
			delays = append(delays, res.Delay)
		}
		assert.Equal(t, []time.Duration{0, 0, time.Second, time.Second, time.Second}, delays)
		res := reserve(t, s, b, two(b, app, time.Hour))
		assert.Equal(t, 2*time.Second, res.Delay, "b's own two are at 1s")
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 0, res.Part)
	}},
	{"the app's limit sets the slot: the refusal and the delay name it", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := spread(key, "a", "b", "c", "d", "app")
		for _, tok := range k[:3] {
			require.True(t, reserve(t, s, tok, two(tok, k[4], 0)).Allowed)
		}
		res := reserve(t, s, k[3], two(k[3], k[4], time.Hour))
		require.True(t, res.Allowed)
		assert.Equal(t, time.Second, res.Delay)
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 1, res.Part, "the app set it")
	}},
	{"the own key sets a later slot than the other's: the other's entry moves to it", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		// One per second under each token and under the app. Token a has
		// sent; a's next goes at 1s, and the app must count it then, not
		// now: b's request after it waits for 2s, a window after a's.
		k := spread(key, "a", "b", "app")
		a, b, app := k[0], k[1], k[2]
		one := func(tok string) contract.Request {
			r := req(1, time.Hour, lim(1, time.Second))
			r.Also = []contract.Part{{Key: app, Limits: []contract.Limit{lim(1, time.Second)}}}
			return r
		}
		require.True(t, reserve(t, s, a, req(1, 0, lim(1, time.Second))).Allowed)
		first := reserve(t, s, a, one(a))
		require.True(t, first.Allowed)
		assert.Equal(t, time.Second, first.Delay)
		assert.Equal(t, 0, first.Part, "token a's own limit")
		second := reserve(t, s, b, one(b))
		require.True(t, second.Allowed)
		assert.Equal(t, 2*time.Second, second.Delay, "the app counts a's request at 1s")
		assert.Equal(t, contract.CauseLimit, second.Cause)
		assert.Equal(t, 1, second.Part)
		require.NoError(t, s.Cancel(ctx, second))
		require.NoError(t, s.Cancel(ctx, first))
		assert.Equal(t, time.Duration(0), reserve(t, s, b, one(b)).Delay, "both cancels reached the app's log")
	}},
	{"cancel gives the units back under every key", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		k := spread(key, "a", "b", "app", "host")
		a, b, app, host := k[0], k[1], k[2], k[3]
		three := func(tok string) contract.Request {
			r := two(tok, app, 0)
			r.Also = append(r.Also, contract.Part{Key: host, Limits: []contract.Limit{lim(5, time.Second)}})
			return r
		}
		reserve(t, s, a, three(a))
		reserve(t, s, a, three(a))
		res := reserve(t, s, b, three(b))
		require.True(t, res.Allowed)
		require.False(t, reserve(t, s, b, three(b)).Allowed)
		require.NoError(t, s.Cancel(ctx, res))
		assert.True(t, reserve(t, s, b, three(b)).Allowed, "the app's unit came back")
		hostOnly := req(1, 0, lim(5, time.Second))
		assert.True(t, reserve(t, s, host, hostOnly).Allowed, "the host's log holds 3 of 5")
		assert.True(t, reserve(t, s, host, hostOnly).Allowed)
		assert.False(t, reserve(t, s, host, hostOnly).Allowed)
	}},
}

// TestSlotsProperty is TestMultiKeyProperty with keys that share no hash
// tag: on the Cluster, concurrent workers reserve over one to four slots
// per request, with moves and conflicts, and no window of any key holds
// more than its N.
func TestSlotsProperty(t *testing.T) {
	for _, im := range impls(t) {
		if im.name != "memory" && im.name != "redis-cluster" {
			continue // one server: the same calls as TestMultiKeyProperty
		}
		t.Run(im.name, func(t *testing.T) {
			for seed := range uint64(3) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					runMultiKeyProperty(t, im, seed, spread)
				})
			}
		})
	}
}

// TestSlotsCalls counts the calls a reservation over several Cluster slots
// makes: one per slot, and with the keys under one tag one in all.
func TestSlotsCalls(t *testing.T) {
	cl := redistest.SharedCluster(t)
	client := cl.Client(t)
	var calls atomic.Int64
	client.AddHook(countHook{&calls})
	s, err := redisstore.NewRedis(client)
	require.NoError(t, err)
	key := uniqueKey(t)
	k := spread(key, "a", "app")
	require.NotEqual(t, redistest.Slot(s.RedisKey(k[0])), redistest.Slot(s.RedisKey(k[1])))
	reserve(t, s, k[0], two(k[0], k[1], 0)) // loads the scripts
	for _, c := range []struct {
		keys  []string
		calls int64
	}{{k, 2}, {tagged(key, "a", "app"), 1}} {
		calls.Store(0)
		res := reserve(t, s, c.keys[0], two(c.keys[0], c.keys[1], time.Hour))
		require.True(t, res.Allowed)
		assert.Equal(t, c.calls, calls.Load(), "%v", c.keys)
	}
}

// countHook counts the commands a client sends.
type countHook struct{ n *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestSlotsConflict: another process fills the app's window between the
// app's reservation and its move, so that the move finds a slot later than
// the own key's. Everything is given back and the request starts again
// from that slot: it goes at the app's new slot, counted there by both keys.
func TestSlotsConflict(t *testing.T) {
	cl := redistest.SharedCluster(t)
	client := cl.Client(t)
	clock := newFakeClock()
	s, err := redisstore.NewRedis(client, redisstore.WithClientTime(clock.Now))
	require.NoError(t, err)
	k := spread(uniqueKey(t), "a", "app")
	a, app := k[0], k[1]
	// Before the move (the parts script with an old entry), two entries at
	// 1.5s in the app's log: its limit, 2 per second, then allows the next
	// at 2.5s.
	at := clock.Now().Add(1500 * time.Millisecond).UnixMicro()
	var injected atomic.Bool
	client.AddHook(moveHook{func(ctx context.Context) {
		if injected.CompareAndSwap(false, true) {
			e := strconv.FormatInt(at, 10)
			require.NoError(t, client.RPush(ctx, s.RedisKey(app), e, e).Err())
		}
	}})
	require.True(t, reserve(t, s, a, req(1, 0, lim(1, time.Second))).Allowed)
	r := req(1, time.Hour, lim(1, time.Second))
	r.Also = []contract.Part{{Key: app, Limits: []contract.Limit{lim(2, time.Second)}}}
	res := reserve(t, s, a, r)
	require.True(t, injected.Load(), "the app's entry moved")
	require.True(t, res.Allowed)
	assert.Equal(t, 2500*time.Millisecond, res.Delay, "the app's slot after the others filled it")
	assert.Equal(t, contract.CauseLimit, res.Cause)
	assert.Equal(t, 1, res.Part)
	// Each log holds the request once, at or after its slot.
	own, err := client.LRange(ctx, s.RedisKey(a), 0, -1).Result()
	require.NoError(t, err)
	assert.Len(t, own, 2)
	apps, err := client.LRange(ctx, s.RedisKey(app), 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, apps, 3, "the two injected and the request's: no entry left behind")
	e, err := strconv.ParseInt(apps[2], 10, 64)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, e, res.Slot)
}

// moveHook calls before ahead of a parts script call that moves entries.
type moveHook struct{ before func(context.Context) }

func (moveHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h moveHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isMove(cmd.Args()) {
			h.before(ctx)
		}
		return next(ctx, cmd)
	}
}
func (h moveHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isMove reports whether args are a call of the parts script that moves
// entries: its old entry (the third argument from the end) is not "0".
func isMove(args []any) bool {
	if len(args) < 8 {
		return false
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	if name != "evalsha" && name != "eval" {
		return false
	}
	src := fmt.Sprint(args[1])
	if name == "evalsha" && src != sha1Of(redisstore.Scripts()["reserve parts"]) ||
		name == "eval" && src != redisstore.Scripts()["reserve parts"] {
		return false
	}
	return fmt.Sprint(args[len(args)-3]) != "0"
}

// sha1Of is the SHA1 Redis names a script by.
func sha1Of(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}
