//go:build integration

package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestACLRuleCluster: on a Cluster, ACLRule plus +cluster|slots +command
// (set on every node: ACLs are per node) is all a
// ClusterClient needs for every operation of the store, the eviction check
// on every master included; NewRedisURL's redis-cluster:// reaches it.
func TestACLRuleCluster(t *testing.T) {
	c := redistest.SharedCluster(t)
	rule := append(strings.Fields(store.ACLRule(redisstore.DefaultPrefix)), "+cluster|slots", "+command")
	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		require.NoError(t, node.Do(ctx, append([]any{"acl", "setuser", "throttle", "reset", "on", ">pw"}, toAny(rule)...)...).Err())
		t.Cleanup(func() {
			_ = node.Do(ctx, "acl", "deluser", "throttle").Err()
			_ = node.Close()
		})
	}
	s, closer, err := redisstore.NewRedisURL("redis-cluster://throttle:pw@" + c.Addrs()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = closer.Close() })
	for _, alg := range []contract.Algorithm{contract.SlidingLog, contract.FixedWindow, contract.SlidingCounter, contract.Buckets} {
		for range 10 { // keys on every master
			key := uniqueKey(t)
			r := algReq(alg, 1, time.Hour, lim(2, time.Minute))
			res := reserve(t, s, key, r)
			require.True(t, res.Allowed)
			require.NoError(t, s.Cancel(ctx, res))
			require.NoError(t, s.Learn(ctx, key, contract.Learned{Pause: time.Millisecond, Remaining: 5, Reset: time.Minute}))
			reserve(t, s, key, r)
		}
	}
}
