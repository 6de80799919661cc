package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// primaryReplica starts a redis-server and a replica of it, and waits until
// the replica is in sync.
func primaryReplica(tb testing.TB) (primary, replica *redistest.Server) {
	tb.Helper()
	var err error
	primary, err = redistest.StartServer("--repl-diskless-sync-delay", "0")
	if err != nil {
		if redistest.InCI() {
			tb.Fatalf("CI is set but redis-server could not be started: %v", err)
		}
		tb.Skipf("needs redis-server on PATH: %v", err)
	}
	tb.Cleanup(primary.Close)
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica, err = redistest.StartServer("--replicaof", host, port)
	require.NoError(tb, err)
	tb.Cleanup(replica.Close)
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := rc.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return primary, replica
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the replica never came in sync: %v %s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplicaAck: with WithReplicaAck, a reservation is on the replica when
// Reserve returns; with the replica gone, Reserve fails with ErrReplicaAck
// and the entries stay on the primary.
func TestReplicaAck(t *testing.T) {
	primary, replica := primaryReplica(t)
	pc, rc := primary.Client(t), replica.Client(t)
	s, err := redisstore.NewRedis(pc, redisstore.WithReplicaAck(1, time.Second))
	require.NoError(t, err)
	key := uniqueKey(t)
	rk := s.RedisKey(key)

	r := req(3, time.Hour, lim(30, time.Second))
	for i := range 10 {
		res := reserve(t, s, key, r)
		require.True(t, res.Allowed)
		// No sleep, no retry: the entries must already be there.
		assert.EqualValues(t, 3*(i+1), rc.LLen(ctx, rk).Val(), "reservation %d is on the replica when Reserve returns", i)
	}

	// The script cache was flushed (a restart, a failover): EVAL, then WAIT.
	require.NoError(t, pc.ScriptFlush(ctx).Err())
	res := reserve(t, s, key, r)
	require.True(t, res.Allowed)
	assert.EqualValues(t, 33, rc.LLen(ctx, rk).Val())

	replica.Close()
	start := time.Now()
	_, err = s.Reserve(ctx, key, r)
	took := time.Since(start)
	require.Error(t, err)
	assert.True(t, errors.Is(err, redisstore.ErrReplicaAck), err.Error())
	assert.Contains(t, err.Error(), "0 of 1 within 1s")
	assert.GreaterOrEqual(t, took, 900*time.Millisecond, "WAIT waited for its timeout")
	assert.EqualValues(t, 36, pc.LLen(ctx, rk).Val(), "the unacknowledged entries stay on the primary, counted")
}

func TestReplicaAckValidates(t *testing.T) {
	_, err := redisstore.NewRedis(redis.NewClient(&redis.Options{}), redisstore.WithReplicaAck(0, time.Second))
	assert.ErrorContains(t, err, "0 replicas")
	_, err = redisstore.NewRedis(redis.NewClient(&redis.Options{}), redisstore.WithReplicaAck(1, 0))
	assert.ErrorContains(t, err, "at least 1ms")
	_, err = redisstore.NewRedis(redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), redisstore.WithReplicaAck(1, time.Second))
	assert.ErrorContains(t, err, "needs a *redis.Client or *redis.ClusterClient")
}

// BenchmarkReserveReplicaAck measures one reservation, one caller at a time,
// with and without waiting for a replica: on a primary with one replica, and
// on the Cluster. The README quotes its figures.
//
//	go test -run '^$' -bench BenchmarkReserveReplicaAck -benchtime 3000x -count 5 ./store/
func BenchmarkReserveReplicaAck(b *testing.B) {
	primary, _ := primaryReplica(b)
	pc := primary.Client(b)
	cluster := redistest.StartCluster(b)
	cc := cluster.Client(b)
	for _, bc := range []struct {
		name   string
		client redis.Scripter
		ack    bool
	}{
		{"primary+replica/no-ack", pc, false},
		{"primary+replica/ack", pc, true},
		{"cluster/no-ack", cc, false},
		{"cluster/ack", cc, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []redisstore.RedisOption
			if bc.ack {
				opts = append(opts, redisstore.WithReplicaAck(1, time.Second))
			}
			s, err := redisstore.NewRedis(bc.client, opts...)
			require.NoError(b, err)
			key := fmt.Sprintf("bench-%s-%d", bc.name, time.Now().UnixNano())
			r := req(1, 0, lim(1_000_000, time.Second))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := s.Reserve(ctx, key, r)
				if err != nil || !res.Allowed {
					b.Fatal(res, err)
				}
			}
		})
	}
}
