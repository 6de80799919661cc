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

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestClusterKeysAndSlots runs reservations and cancels for many rate keys
// on a real Redis Cluster while MONITOR records, on every master, each
// command the scripts run. The logs spread over slots and over all three
// masters, and every command a script runs touches exactly the key the
// caller passed in KEYS (no script builds a key name).
func TestClusterKeysAndSlots(t *testing.T) {
	c := redistest.SharedCluster(t)
	cc := c.Client(t)
	s, err := redisstore.NewRedis(cc)
	require.NoError(t, err)

	nodes, err := c.Nodes(ctx)
	require.NoError(t, err)
	var mons []*monitor
	for _, n := range nodes {
		if n.Role == redistest.Master {
			mons = append(mons, startMonitor(t, n.Addr))
		}
	}
	require.Len(t, mons, 3)

	base := uniqueKey(t)
	passed := map[string]bool{}
	slots := map[int]bool{}
	masters := map[string]bool{}
	r := req(1, time.Hour, lim(2, time.Second))
	for i := range 60 {
		key := fmt.Sprintf("%s-%d", base, i)
		rk := s.RedisKey(key)
		passed[rk] = true
		passed[s.FeedbackKey(key)] = true
		passed[rk+":seen"] = true // the log's seen mark (a lost log waits out its window)
		require.Equal(t, redistest.Slot(rk), redistest.Slot(s.FeedbackKey(key)), "the feedback key shares the log's slot")
		slots[redistest.Slot(rk)] = true
		m, err := c.MasterOf(ctx, rk)
		require.NoError(t, err)
		masters[m] = true
		var last contract.Reservation
		for range 3 {
			last = reserve(t, s, key, r)
			require.True(t, last.Allowed)
		}
		require.NoError(t, s.Cancel(ctx, last))
	}
	assert.Len(t, masters, 3, "60 rate keys should land on every master")
	assert.Greater(t, len(slots), 50, "60 rate keys should land in many slots")

	// A marker written last on each master: once MONITOR has shown it, it
	// has shown everything before it.
	keyed := 0
	for _, m := range mons {
		lines := m.until(t, "redistest-monitor-end")
		for _, l := range lines {
			cmd, args, fromScript := parseMonitor(l)
			if !fromScript {
				continue
			}
			switch cmd {
			case "TIME":
				continue
			case "LLEN", "LINDEX", "LPOP", "LTRIM", "RPUSH", "PTTL", "PEXPIRE", "LREM",
				"HMGET", "HGET", "HGETALL", "HSET", "HDEL", "HINCRBY",
				"GET", "SET", "DEL": // the seen mark
			default:
				t.Errorf("a script ran %s, which this test does not know: %s", cmd, l)
				continue
			}
			require.NotEmpty(t, args, l)
			assert.True(t, passed[args[0]], "a script touched %q, a key no caller passed: %s", args[0], l)
			keyed++
		}
	}
	t.Logf("%d Redis keys (a log and a feedback key per rate key) in %d slots on %d masters; %d keyed commands run by scripts, each on the caller's keys",
		len(passed), len(slots), len(masters), keyed)
	// Each reservation runs at least LINDEX and RPUSH on its key.
	assert.Greater(t, keyed, 60*3*2, "MONITOR saw the scripts' commands")
}

// TestClusterScriptFlush: after SCRIPT FLUSH on every master, reservations
// and cancels go on, through EVAL, on every master.
func TestClusterScriptFlush(t *testing.T) {
	cc := redistest.SharedCluster(t).Client(t)
	s, err := redisstore.NewRedis(cc)
	require.NoError(t, err)
	base := uniqueKey(t)
	r := req(1, time.Hour, lim(1, time.Hour))
	for round := range 2 {
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.ScriptFlush(ctx).Err()
		}))
		for i := range 30 {
			key := fmt.Sprintf("%s-%d", base, i)
			res := reserve(t, s, key, r)
			require.True(t, res.Allowed)
			if round == 0 {
				assert.Equal(t, time.Duration(0), res.Delay)
			} else {
				assert.Greater(t, res.Delay, 59*time.Minute, "the log survived the flush")
			}
		}
	}
}

// TestRideOverridesOnACluster: on a Redis Cluster the reads ride in the
// reservation's pipeline, which the client splits by node (the override's
// key and the rate key are in different slots).
func TestRideOverridesOnACluster(t *testing.T) {
	c := redistest.SharedCluster(t).Client(t)
	s, err := redisstore.NewRedis(c, redisstore.WithPrefix("ride-"+uniqueKey(t)+":"))
	require.NoError(t, err)
	rule := "api"
	require.NoError(t, s.SetOverride(ctx, rule, []byte(`{"limits":[]}`), time.Minute, []byte("set")))
	for i := range 8 {
		key := uniqueKey(t)
		got := rideOn(t, s, rule)
		res, err := s.Reserve(ctx, key, req(1, 0, lim(10, time.Second)))
		require.NoError(t, err)
		assert.True(t, res.Allowed)
		r := rideAnswer(t, got)
		require.NoError(t, r.err, "ride %d", i)
		assert.Equal(t, map[string][]byte{rule: []byte(`{"limits":[]}`)}, r.docs)
	}
}
