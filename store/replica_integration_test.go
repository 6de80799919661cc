//go:build integration

package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestReplicaAckCluster: on a Cluster, the script and WAIT run on the key's
// master: every reservation is on that master's replica when Reserve
// returns, for keys on every master.
func TestReplicaAckCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	cc := c.Client(t)
	s, err := redisstore.NewRedis(cc, redisstore.WithReplicaAck(1, time.Second))
	require.NoError(t, err)
	base := uniqueKey(t)
	masters := map[string]bool{}
	for i := range 20 {
		key := fmt.Sprintf("%s-%d", base, i)
		rk := s.RedisKey(key)
		master, err := c.MasterOf(ctx, rk)
		require.NoError(t, err)
		masters[master] = true
		replicaAddr, err := c.ReplicaOf(ctx, master)
		require.NoError(t, err)
		rc := redis.NewClient(&redis.Options{Addr: replicaAddr, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.ReadOnly(ctx).Err()
		}})
		for j := range 3 {
			require.True(t, reserve(t, s, key, req(1, time.Hour, lim(10, time.Second))).Allowed)
			assert.EqualValues(t, j+1, rc.LLen(ctx, rk).Val(), "key %d reservation %d on the replica %s", i, j, replicaAddr)
		}
		_ = rc.Close()
	}
	assert.Len(t, masters, 3)
}
