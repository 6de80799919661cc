//go:build integration

package store_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestEvictionCheckCluster: the check asks every master of a Cluster, and one
// master with an evicting policy is enough to refuse (any key may live
// there). The shared Cluster's setting is restored at the end.
func TestEvictionCheckCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	cc := c.Client(t)
	r := req(1, 0, lim(10, time.Minute))

	s, err := redisstore.NewRedis(cc)
	require.NoError(t, err)
	assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed, "noeviction everywhere")

	master, err := c.MasterOf(ctx, uniqueKey(t))
	require.NoError(t, err)
	node := redis.NewClient(&redis.Options{Addr: master})
	t.Cleanup(func() {
		_ = node.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err()
		_ = node.ConfigSet(ctx, "maxmemory", "0").Err()
		_ = node.Close()
	})
	require.NoError(t, node.ConfigSet(ctx, "maxmemory", "100mb").Err())
	require.NoError(t, node.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err())

	s, err = redisstore.NewRedis(cc)
	require.NoError(t, err)
	for range 5 {
		_, err = s.Reserve(ctx, uniqueKey(t), r) // keys on every master
		require.ErrorIs(t, err, redisstore.ErrEvictingPolicy)
		assert.Contains(t, err.Error(), master+": maxmemory-policy volatile-lru")
	}
}
