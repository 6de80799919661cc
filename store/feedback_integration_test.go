//go:build integration

package store_test

import (
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestFeedbackCluster runs the feedback cases on a Redis Cluster, where the
// log and its feedback hash must share a slot (one script call names both),
// when REDIS_CLUSTER_ADDRS lists its nodes (comma-separated), e.g. a
// three-master cluster on loopback.
func TestFeedbackCluster(t *testing.T) {
	addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		t.Skip("set REDIS_CLUSTER_ADDRS to run the feedback cases on a Redis Cluster")
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	t.Cleanup(func() { _ = client.Close() })
	for _, c := range feedbackCases {
		t.Run(c.name, func(t *testing.T) {
			clock := newFakeClock()
			st, err := redisstore.NewRedis(client, redisstore.WithClientTime(clock.Now))
			require.NoError(t, err)
			c.run(t, st, st, clock, uniqueKey(t))
		})
	}
}
