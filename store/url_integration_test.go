//go:build integration

package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestNewRedisURLSentinel: redis-sentinel:// finds the master through a
// real Sentinel, with the master's password in the password option, and the
// store runs on it (the eviction check included: a master with an evicting
// policy is refused).
func TestNewRedisURLSentinel(t *testing.T) {
	master := redistest.Start(t, "--requirepass", urlSecret, "--maxmemory", "10mb", "--maxmemory-policy", "noeviction")
	sentinel := redistest.StartSentinel(t, "mymaster", master.Addr)
	s, closer, err := redisstore.NewRedisURL("redis-sentinel://" + sentinel.Addr + "?master_name=mymaster&password=" + urlSecret)
	require.NoError(t, err)
	t.Cleanup(func() { _ = closer.Close() })
	r := req(1, time.Second, lim(1, time.Second))
	res := reserve(t, s, uniqueKey(t), r)
	assert.True(t, res.Allowed)
	require.NoError(t, s.Cancel(ctx, res))

	evicting := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	sentinel = redistest.StartSentinel(t, "evicting", evicting.Addr)
	s, closer, err = redisstore.NewRedisURL("redis-sentinel://" + sentinel.Addr + "?master_name=evicting")
	require.NoError(t, err)
	t.Cleanup(func() { _ = closer.Close() })
	_, err = s.Reserve(ctx, uniqueKey(t), r)
	require.ErrorIs(t, err, redisstore.ErrEvictingPolicy)
}
