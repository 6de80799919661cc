//go:build integration

package store_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestFailoverLoss measures what a failover loses: callers reserve as fast
// as they can on one key of a Cluster, the key's master is killed, its
// replica takes over, and every reservation a caller was granted before the
// kill is looked for in the new master's log. Without WithReplicaAck the
// newest may be missing (replication is asynchronous): the test logs how
// many. With it, none may be: each granted reservation was on the replica.
//
//	go test -tags integration -run TestFailoverLoss -count 5 -v ./store/
func TestFailoverLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two Redis Clusters and fails a master over in each")
	}
	for _, ack := range []bool{false, true} {
		t.Run("ack="+strconv.FormatBool(ack), func(t *testing.T) {
			lost, granted := failoverLoss(t, ack)
			t.Logf("reservations granted before the kill: %d; missing from the new master: %d", granted, lost)
			if ack {
				assert.Zero(t, lost, "an acknowledged reservation was lost")
			}
		})
	}
}

func failoverLoss(t *testing.T, ack bool) (lost, granted int) {
	c := redistest.StartCluster(t)
	cc := c.Client(t)
	var opts []redisstore.RedisOption
	if ack {
		opts = append(opts, redisstore.WithReplicaAck(1, time.Second))
	}
	s, err := redisstore.NewRedis(cc, opts...)
	require.NoError(t, err)
	key := uniqueKey(t)
	rk := s.RedisKey(key)
	master, err := c.MasterOf(ctx, rk)
	require.NoError(t, err)
	replica, err := c.ReplicaOf(ctx, master)
	require.NoError(t, err)

	type grant struct {
		slot int64
		at   time.Time // when the caller learnt of it
	}
	var (
		mu      sync.Mutex
		grants  []grant
		errs    int
		ackErrs int
		stop    atomic.Bool
		wg      sync.WaitGroup
		afterOK atomic.Int64
	)
	var killedAt atomic.Pointer[time.Time]
	r := req(1, 0, lim(1_000_000, time.Hour))
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				res, err := s.Reserve(rctx, key, r)
				cancel()
				now := time.Now()
				mu.Lock()
				if err != nil {
					errs++
					if errors.Is(err, redisstore.ErrReplicaAck) {
						ackErrs++
					}
				} else if res.Allowed {
					grants = append(grants, grant{res.Slot, now})
					if k := killedAt.Load(); k != nil && now.After(*k) {
						afterOK.Add(1)
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	k := time.Now()
	killedAt.Store(&k)
	require.NoError(t, c.Kill(master))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m, err := c.MasterOf(ctx, rk); err == nil && m == replica {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The new master has no replica until the old one comes back (as its
	// replica): until then, with WithReplicaAck, every reservation fails
	// with ErrReplicaAck.
	require.NoError(t, c.Restart(master))
	for afterOK.Load() < 100 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	require.GreaterOrEqual(t, afterOK.Load(), int64(100), "reservations did not resume after the failover")
	now, err := c.MasterOf(ctx, rk)
	require.NoError(t, err)
	require.Equal(t, replica, now)

	entries, err := cc.LRange(ctx, rk, 0, -1).Result()
	require.NoError(t, err)
	inLog := map[string]bool{}
	for _, e := range entries {
		inLog[e] = true
	}
	for _, g := range grants {
		if g.at.Before(k) {
			granted++
			if !inLog[strconv.FormatInt(g.slot, 10)] {
				lost++
			}
		}
	}
	t.Logf("errors during the failover: %d (%d of them ErrReplicaAck); granted after it: %d", errs, ackErrs, afterOK.Load())
	require.Positive(t, granted)
	return lost, granted
}
