package store_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// tripHook counts the round trips a client makes after it is reset: one
// per command sent alone, one per pipeline.
type tripHook struct{ trips atomic.Int64 }

func (h *tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		return next(ctx, cmd)
	}
}
func (h *tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		return next(ctx, cmds)
	}
}

// rideResult is what a ride was answered with.
type rideResult struct {
	docs map[string][]byte
	err  error
}

// rideOn asks s for the overrides of rules with its next reservation and
// returns where the answer comes.
func rideOn(t *testing.T, s *redisstore.Redis, rules ...string) chan rideResult {
	t.Helper()
	got := make(chan rideResult, 1)
	require.True(t, s.RideOverrides(rules, func(docs map[string][]byte, err error) { got <- rideResult{docs, err} }))
	return got
}

func rideAnswer(t *testing.T, got chan rideResult) rideResult {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("the ride was never answered")
		return rideResult{}
	}
}

// TestRideOverridesWithTheReservation: the overrides a process polls are
// read in the round trip of its next reservation (plain, batched, of a
// lane, and after the server lost its scripts, when the script goes again
// alone); a ride waits for a reservation, and a store whose reservations
// each wait for replicas does not take one.
func TestRideOverridesWithTheReservation(t *testing.T) {
	c := redistest.Start(t).Client(t) // its own server: the test flushes its scripts
	h := &tripHook{}
	c.AddHook(h)
	rule := "ride-" + uniqueKey(t)
	plain, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	require.NoError(t, plain.SetOverride(ctx, rule, []byte(`{"limits":[]}`), time.Minute, []byte("set")))
	batched, err := redisstore.NewRedis(c, redisstore.WithBatching(8))
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		s     *redisstore.Redis
		req   contract.Request
		flush bool
		trips int64
	}{
		{"plain", plain, req(1, 0, lim(10, time.Second)), false, 1},
		{"batched", batched, req(1, 0, lim(10, time.Second)), false, 1},
		{"the scripts lost", plain, req(1, 0, lim(10, time.Second)), true, 2}, // the EVAL resent alone
		{"lanes", plain, laneReq(0, true, time.Second), false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			reserve(t, tc.s, key, tc.req) // the store's first call checks the server's eviction policy
			got := rideOn(t, tc.s, rule, rule+"-none")
			time.Sleep(20 * time.Millisecond)
			select {
			case <-got:
				t.Fatal("answered before any reservation")
			default:
			}
			if tc.flush {
				require.NoError(t, c.ScriptFlush(ctx).Err())
			}
			h.trips.Store(0)
			res, err := tc.s.Reserve(ctx, key, tc.req)
			require.NoError(t, err)
			assert.True(t, res.Allowed)
			r := rideAnswer(t, got)
			require.NoError(t, r.err)
			assert.Equal(t, map[string][]byte{rule: []byte(`{"limits":[]}`)}, r.docs)
			assert.Equal(t, tc.trips, h.trips.Load(), "round trips")
		})
	}

	acked, err := redisstore.NewRedis(c, redisstore.WithReplicaAck(1, time.Second))
	require.NoError(t, err)
	assert.False(t, acked.RideOverrides([]string{rule}, func(map[string][]byte, error) {}), "each reservation waits for its replicas alone")
}
