//go:build integration

package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestMultiKeyCluster: on a Redis Cluster the keys of one request that
// share a hash tag are reserved in one call, and those that do not in one
// call per slot, each key's log in its own slot; a store on one server
// takes either in one call.
func TestMultiKeyCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	s, err := redisstore.NewRedis(cl.Client(t))
	require.NoError(t, err)
	assert.True(t, s.Sharded())
	key := uniqueKey(t)
	r := two("", key+"-app", 0)
	res, err := s.Reserve(ctx, key+"-a", r)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	assert.Len(t, res.AlsoEntries, 1, "the app's entry, on its own master's clock")
	assert.NotEqual(t, redistest.Slot(s.RedisKey(key+"-a")), redistest.Slot(s.RedisKey(key+"-app")))
	n, err := cl.Client(t).LLen(ctx, s.RedisKey(key+"-app")).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "recorded in the app's log")
	require.NoError(t, s.Cancel(ctx, res))
	n, err = cl.Client(t).LLen(ctx, s.RedisKey(key+"-app")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "and cancelled there")
	assert.False(t, errors.Is(err, redis.Nil))

	k := tagged(key, "a", "app")
	res, err = s.Reserve(ctx, k[0], two(k[0], k[1], 0))
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, "throttle:{"+key+"}app", s.RedisKey(k[1]), "a key with its own tag is named as it is")

	one, err := redisstore.NewRedis(redistest.Shared(t).Client(t))
	require.NoError(t, err)
	assert.False(t, one.Sharded())
	res, err = one.Reserve(ctx, key+"-a", r)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "one server needs no shared tag")
}

// TestMultiKeyClusterMonitor reserves and cancels under three keys per
// request, for 30 hash tags, on a real Cluster while MONITOR records what
// every master runs: each script command touches a key the caller passed,
// in its request's slot; the tags spread over every master, each request's
// keys on one.
func TestMultiKeyClusterMonitor(t *testing.T) {
	c := redistest.SharedCluster(t)
	s, err := redisstore.NewRedis(c.Client(t))
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
	slotOf := map[string]int{} // every Redis key passed, and its request's slot
	masters := map[string]bool{}
	for i := range 30 {
		k := tagged(fmt.Sprintf("%s-%d", base, i), "token", "app", "platform")
		r := req(1, time.Hour, lim(2, time.Second))
		r.Also = []contract.Part{{Key: k[1], Limits: []contract.Limit{lim(3, time.Second)}}, {Key: k[2], Limits: []contract.Limit{lim(4, time.Second)}}}
		slot := redistest.Slot(s.RedisKey(k[0]))
		for _, key := range k {
			slotOf[s.RedisKey(key)] = slot
		}
		slotOf[s.FeedbackKey(k[0])] = slot
		slotOf[s.RedisKey(k[0])+":seen"] = slot // the log's seen mark
		m, err := c.MasterOf(ctx, s.RedisKey(k[0]))
		require.NoError(t, err)
		masters[m] = true
		var last contract.Reservation
		for range 3 {
			last = reserve(t, s, k[0], r)
			require.True(t, last.Allowed)
		}
		require.NoError(t, s.Cancel(ctx, last))
	}
	assert.Len(t, masters, 3, "30 tags should land on every master")

	keyed, parts := 0, 0
	for _, m := range mons {
		for _, l := range m.until(t, "redistest-monitor-end") {
			cmd, args, fromScript := parseMonitor(l)
			if !fromScript || cmd == "TIME" {
				continue
			}
			require.NotEmpty(t, args, l)
			slot, ok := slotOf[args[0]]
			if !assert.True(t, ok, "a script touched %q, a key no caller passed: %s", args[0], l) {
				continue
			}
			assert.Equal(t, slot, redistest.Slot(args[0]), l)
			keyed++
			if strings.HasSuffix(args[0], "app") || strings.HasSuffix(args[0], "platform") {
				parts++
			}
		}
	}
	t.Logf("%d keyed commands run by scripts, %d of them on the extra keys, each on a key passed, in its request's slot", keyed, parts)
	assert.Greater(t, parts, 30*3*2*2, "MONITOR saw the extra keys' LINDEX and RPUSH")
}
