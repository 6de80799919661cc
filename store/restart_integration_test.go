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
	"github.com/throttle-go/throttle/store/internal/script"
)

// TestRedisScriptsSurviveRestart: a redis-server that restarts comes back
// without its script cache (and, without persistence, without data); the
// same store keeps working on the same client, through EVAL.
func TestRedisScriptsSurviveRestart(t *testing.T) {
	srv, err := redistest.StartServer()
	if err != nil {
		if redistest.InCI() {
			t.Fatalf("CI is set but redis-server could not be started: %v", err)
		}
		t.Skipf("needs redis-server on PATH: %v", err)
	}
	t.Cleanup(srv.Close)
	c := srv.Client(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	key := uniqueKey(t)
	r := req(1, time.Hour, lim(1, time.Hour))
	require.True(t, reserve(t, s, key, r).Allowed)
	assert.Greater(t, reserve(t, s, key, r).Delay, 59*time.Minute)

	require.NoError(t, srv.Restart())
	exists, err := c.ScriptExists(ctx, redis.NewScript(script.Reserve("log")).Hash()).Result()
	require.NoError(t, err)
	require.Equal(t, []bool{false}, exists, "the restarted server has no cached script")
	// The log went with the restart (no persistence): the key starts afresh.
	res := reserve(t, s, key, r)
	require.True(t, res.Allowed)
	assert.Equal(t, time.Duration(0), res.Delay)
	require.NoError(t, s.Cancel(ctx, res))
	assert.Zero(t, c.LLen(ctx, s.RedisKey(key)).Val(), "Cancel ran on the restarted server")
}
