package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/memstore"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

func realRedis(t *testing.T) *redis.Client {
	srv := sharedOrSkip(t)
	return srv.Client(t)
}

// TestRedisMemoryPerEntry measures what one logged request costs in Redis:
// MEMORY USAGE of a log of 5,000 entries, divided by 5,000. The README quotes
// the figure this logs.
func TestRedisMemoryPerEntry(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	key := uniqueKey(t)
	r := req(100, 0, lim(5000, time.Hour))
	for range 50 {
		res := reserve(t, s, key, r)
		require.True(t, res.Allowed)
	}
	rk := s.RedisKey(key)
	require.EqualValues(t, 5000, c.LLen(ctx, rk).Val())
	bytes, err := c.MemoryUsage(ctx, rk, 0).Result()
	require.NoError(t, err)
	per := float64(bytes) / 5000
	t.Logf("MEMORY USAGE of a log of 5000 entries: %d bytes, %.2f bytes per logged request", bytes, per)
	assert.Less(t, per, 16.0, "a LIST entry should cost about 10 bytes")
}

// TestRedisKeyLayout checks the Cluster-safe names, the TTL (at most the
// longest window plus the half-window period it is set for, see
// the log script (internal/script/log.lua)) and that the log never outgrows the longest window's N plus
// the trim's slack.
func TestRedisKeyLayout(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c, redisstore.WithPrefix("app1:"))
	require.NoError(t, err)
	key := uniqueKey(t)
	assert.Equal(t, "app1:{"+key+"}", s.RedisKey(key))

	limits := []contract.Limit{lim(5, 50*time.Millisecond), lim(20, 300*time.Millisecond)}
	for range 400 {
		res, err := s.Reserve(ctx, key, contract.Request{Limits: limits, Cost: 1, MaxWait: 0})
		require.NoError(t, err)
		if res.Allowed {
			ttl := c.PTTL(ctx, s.RedisKey(key)).Val()
			assert.Greater(t, ttl, time.Duration(0))
			assert.LessOrEqual(t, ttl, (300+150+1)*time.Millisecond)
		}
		assert.LessOrEqual(t, c.LLen(ctx, s.RedisKey(key)).Val(), int64(20+8),
			"at most the longest window's N, plus the trim's slack (8)")
		time.Sleep(time.Millisecond)
	}
	keys := c.Keys(ctx, "app1:{"+key+"}*").Val()
	seen := s.RedisKey(key) + ":seen"
	assert.ElementsMatch(t, []string{s.RedisKey(key), seen}, keys, "the log and its seen mark")
	logTTL := c.PTTL(ctx, s.RedisKey(key)).Val() // read first: the mark's is read later
	assert.LessOrEqual(t, c.PTTL(ctx, seen).Val(), logTTL, "the mark lives no longer than the log")
}

// TestRedisScriptCacheLoss: after SCRIPT FLUSH (a restart, a failover: Redis 7
// does not replicate its script cache) the next call loads the script again.
func TestRedisScriptCacheLoss(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	key := uniqueKey(t)
	r := req(1, time.Hour, lim(1, time.Second))
	reserve(t, s, key, r)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	res := reserve(t, s, key, r)
	assert.True(t, res.Allowed)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	require.NoError(t, s.Cancel(ctx, res))
}

// fakeScripter answers every script with a fixed reply or error.
type fakeScripter struct {
	redis.Scripter
	reply any
	err   error
}

func (f fakeScripter) cmd(ctx context.Context) *redis.Cmd {
	c := redis.NewCmd(ctx)
	if f.err != nil {
		c.SetErr(f.err)
	} else {
		c.SetVal(f.reply)
	}
	return c
}

func (f fakeScripter) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.cmd(ctx)
}

func (f fakeScripter) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.cmd(ctx)
}

// TestRedisOddReplies: a reply of the wrong shape is an error, never a panic.
func TestRedisOddReplies(t *testing.T) {
	for name, reply := range map[string]any{
		"not a list":        int64(1),
		"too short":         []any{int64(1), int64(0)},
		"string element":    []any{int64(1), "0", int64(5), int64(0)},
		"limit out of band": []any{int64(1), int64(0), int64(5), int64(7)},
		"negative wait":     []any{int64(1), int64(-3), int64(5), int64(0)},
		"nil element":       []any{int64(1), nil, int64(5), int64(0)},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := redisstore.NewRedis(fakeScripter{reply: reply})
			require.NoError(t, err)
			_, err = s.Reserve(ctx, "k", req(1, 0, lim(1, time.Second)))
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "store: redis reserve:"), err.Error())
		})
	}
}

func TestNewRedisValidates(t *testing.T) {
	_, err := redisstore.NewRedis(nil)
	assert.ErrorContains(t, err, "nil client")
	_, err = redisstore.NewRedis((*redis.Client)(nil))
	assert.ErrorContains(t, err, "nil client (*redis.Client)")
	_, err = redisstore.NewRedis((*redis.ClusterClient)(nil))
	assert.ErrorContains(t, err, "nil client")
	_, err = redisstore.NewRedis(fakeScripter{}, nil)
	assert.ErrorContains(t, err, "nil option")
	_, err = redisstore.NewRedis(fakeScripter{}, redisstore.WithClientTime(nil))
	assert.ErrorContains(t, err, "nil clock")
	_, err = redisstore.NewRedis(fakeScripter{}, redisstore.WithPrefix("app{1}:"))
	assert.ErrorContains(t, err, "braces")
	_, err = memstore.NewMemory(memstore.WithClock(nil))
	assert.ErrorContains(t, err, "nil clock")
	_, err = memstore.NewMemory(nil)
	assert.ErrorContains(t, err, "nil option")
}

// TestMemoryForgetsIdleKeys: the memory store drops expired logs lazily, so a
// process that sees many keys once does not keep them all.
func TestMemoryForgetsIdleKeys(t *testing.T) {
	clock := newFakeClock()
	m, err := memstore.NewMemory(memstore.WithClock(clock.Now))
	require.NoError(t, err)
	r := req(1, 0, lim(1, time.Second))
	for i := range 10_000 {
		reserve(t, m, "once-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String(), r)
		clock.Advance(time.Millisecond)
	}
	assert.LessOrEqual(t, m.Len(), 4096+1000, "keys idle for a window are swept")
}

// TestRedisLogCommands counts, with MONITOR on a server of its own, the
// commands the log's script runs for a common reservation (a log that
// exists, no feedback, no trim or TTL due): TIME, LINDEX of the last entry,
// LINDEX of the entry that decides, RPUSH. Each command costs about as much
// as a short script's whole overhead, so assembling the script from shared
// parts must not add any.
func TestRedisLogCommands(t *testing.T) {
	srv, err := redistest.StartServer()
	if err != nil {
		t.Skipf("needs redis-server: %v", err)
	}
	t.Cleanup(srv.Close)
	s, err := redisstore.NewRedis(srv.Client(t))
	require.NoError(t, err)
	key := uniqueKey(t)
	r := req(1, 0, lim(100, time.Hour))
	reserve(t, s, key, r)
	reserve(t, s, key, r)
	m := startMonitor(t, srv.Addr)
	require.True(t, reserve(t, s, key, r).Allowed)
	var cmds []string
	for _, l := range m.until(t, "redistest-monitor-end") {
		if cmd, _, fromScript := parseMonitor(l); fromScript {
			cmds = append(cmds, cmd)
		}
	}
	assert.Equal(t, []string{"TIME", "LINDEX", "LINDEX", "RPUSH"}, cmds)
}
