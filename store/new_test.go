package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestPublicConstructors: the public constructors hand their options to the
// backends and return them as a Store; a zero option is refused as a nil one.
func TestPublicConstructors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	req := contract.Request{Limits: []contract.Limit{{N: 1, Per: time.Hour}}, Cost: 1}

	clock := newFakeClock()
	m, err := store.NewMemory(store.WithClock(clock.Now))
	require.NoError(t, err)
	assert.True(t, m.Caps().InProcess)
	res, err := m.Reserve(ctx, "k", req)
	require.NoError(t, err)
	assert.Equal(t, clock.Now().UnixMicro(), res.Slot, "the memory store runs on the clock given")
	_, err = store.NewMemory(store.MemoryOption{})
	assert.ErrorContains(t, err, "nil option")

	srv := redistest.Shared(t)
	prefix := "public:" + uniqueKey(t) + ":"
	r, err := store.NewRedis(srv.Client(t), store.WithPrefix(prefix), store.WithEvictionCheck(store.EvictionOff))
	require.NoError(t, err)
	_, err = r.Reserve(ctx, "k", req)
	require.NoError(t, err)
	n, err := srv.Client(t).Exists(ctx, prefix+"{k}").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the log is under the prefix given")
	_, err = store.NewRedis(srv.Client(t), store.RedisOption{})
	assert.ErrorContains(t, err, "nil option")
	_, err = store.NewRedis(nil)
	assert.ErrorContains(t, err, "nil client")
	_, _, err = store.NewRedisURL("http://example.com")
	assert.Error(t, err)
}

// TestPublicNames: the public constants, errors and EvictionCheck are the
// Redis backend's.
func TestPublicNames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, redisstore.DefaultPrefix, store.DefaultPrefix)
	assert.Equal(t, 1024, redisstore.MaxBatch, "WithBatching's doc says 1024")
	assert.Equal(t, 5*time.Minute, redisstore.EvictionRecheck, "WithEvictionCheck's doc says 5 minutes")
	for _, c := range []struct {
		pub store.EvictionCheck
		own redisstore.EvictionCheck
	}{{store.EvictionRefuse, redisstore.EvictionRefuse}, {store.EvictionWarn, redisstore.EvictionWarn}, {store.EvictionOff, redisstore.EvictionOff}} {
		assert.Equal(t, uint8(c.own), uint8(c.pub))
		assert.Equal(t, c.own.String(), c.pub.String())
	}
	assert.Equal(t, "EvictionWarn", store.EvictionWarn.String())
	assert.ErrorIs(t, &store.KeyStateError{Key: "k"}, store.ErrKeyState)
}
