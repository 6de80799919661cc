package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestEvictionCheck: on a server with a memory limit and an evicting policy,
// EvictionRefuse (the default) fails every Reserve with ErrEvictingPolicy,
// naming the policy; EvictionWarn logs it and reserves; EvictionOff does not
// ask. noeviction, and no memory limit, pass.
func TestEvictionCheck(t *testing.T) {
	lru := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	volatile := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "volatile-ttl")
	noEviction := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "noeviction")
	unlimited := redistest.Start(t, "--maxmemory", "0", "--maxmemory-policy", "allkeys-lru")
	r := req(1, 0, lim(10, time.Minute))

	for name, srv := range map[string]*redistest.Server{"allkeys-lru": lru, "volatile-ttl": volatile} {
		t.Run(name, func(t *testing.T) {
			s, err := redisstore.NewRedis(srv.Client(t))
			require.NoError(t, err)
			for range 3 {
				_, err = s.Reserve(ctx, uniqueKey(t), r)
				require.ErrorIs(t, err, redisstore.ErrEvictingPolicy)
				assert.Contains(t, err.Error(), "maxmemory-policy "+name+" with maxmemory 10485760")
			}
			var logs logBuffer
			s, err = redisstore.NewRedis(srv.Client(t), redisstore.WithEvictionCheck(redisstore.EvictionWarn), redisstore.WithLogger(logs.logger()))
			require.NoError(t, err)
			assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed)
			assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed)
			assert.Equal(t, 1, strings.Count(logs.String(), "maxmemory-policy "+name), "once per check: %s", logs.String())

			s, err = redisstore.NewRedis(srv.Client(t), redisstore.WithEvictionCheck(redisstore.EvictionOff))
			require.NoError(t, err)
			assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed)
		})
	}
	for name, srv := range map[string]*redistest.Server{"noeviction": noEviction, "no maxmemory": unlimited} {
		t.Run(name, func(t *testing.T) {
			s, err := redisstore.NewRedis(srv.Client(t))
			require.NoError(t, err)
			assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed)
		})
	}
}

// TestEvictionCheckOptions: EvictionWarn needs a logger; unknown checks and
// nil loggers are refused.
func TestEvictionCheckOptions(t *testing.T) {
	_, err := redisstore.NewRedis(fakeScripter{}, redisstore.WithEvictionCheck(redisstore.EvictionWarn))
	assert.ErrorContains(t, err, "needs WithLogger")
	_, err = redisstore.NewRedis(fakeScripter{}, redisstore.WithEvictionCheck(redisstore.EvictionCheck(9)))
	assert.ErrorContains(t, err, "unknown check")
	_, err = redisstore.NewRedis(fakeScripter{}, redisstore.WithLogger(nil))
	assert.ErrorContains(t, err, "nil logger")
	assert.Equal(t, "EvictionRefuse", redisstore.EvictionRefuse.String())
}

// TestEvictionCheckWithoutConfig: a user denied CONFIG (a managed Redis, an
// ACL) is checked through INFO memory; one denied both is let through, and
// EvictionWarn says the policy could not be read.
func TestEvictionCheckWithoutConfig(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lfu")
	admin := srv.Client(t)
	rule := strings.Fields(store.ACLRule(redisstore.DefaultPrefix))
	require.NoError(t, admin.Do(ctx, append([]any{"acl", "setuser", "noconfig", "on", ">pw1"}, toAny(rule)...)...).Err())
	require.NoError(t, admin.Do(ctx, append([]any{"acl", "setuser", "blind", "on", ">pw2"}, toAny(append(rule[:len(rule):len(rule)], "-info"))...)...).Err())
	r := req(1, 0, lim(10, time.Minute))

	s, err := redisstore.NewRedis(userClient(t, srv, "noconfig", "pw1"))
	require.NoError(t, err)
	_, err = s.Reserve(ctx, uniqueKey(t), r)
	require.ErrorIs(t, err, redisstore.ErrEvictingPolicy, "read through INFO")
	assert.Contains(t, err.Error(), "allkeys-lfu")

	var logs logBuffer
	s, err = redisstore.NewRedis(userClient(t, srv, "blind", "pw2"), redisstore.WithEvictionCheck(redisstore.EvictionWarn), redisstore.WithLogger(logs.logger()))
	require.NoError(t, err)
	assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed)
	assert.Contains(t, logs.String(), "cannot read the Redis maxmemory-policy")
	s, err = redisstore.NewRedis(userClient(t, srv, "blind", "pw2"))
	require.NoError(t, err)
	assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed, "an unknown policy is not refused")
}

// TestOOMSurfaces: a server over its memory limit under noeviction answers
// the reserve script's write with OOM, and the store reports it as it is.
func TestOOMSurfaces(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	c := srv.Client(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	r := req(1, 0, lim(10, time.Minute))
	require.True(t, reserve(t, s, uniqueKey(t), r).Allowed)
	// 2 MB of data, then a limit of 1 MB: the server stays above it (the
	// limit is lowered after the store's first check, which it passed).
	for i := range 32 {
		require.NoError(t, c.Set(ctx, fmt.Sprintf("filler:%d", i), strings.Repeat("x", 64<<10), 0).Err())
	}
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1mb").Err())
	_, err = s.Reserve(ctx, uniqueKey(t), r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OOM command not allowed")
	assert.NotErrorIs(t, err, redisstore.ErrKeyState)
}

// configScripter is a server that counts the eviction checks: it answers
// CONFIG GET with policy (or err), and every script with a grant.
type configScripter struct {
	fakeScripter
	mu     sync.Mutex
	checks int
	policy string
	err    error
	gate   chan struct{} // non-nil: CONFIG GET waits for it
}

func (c *configScripter) ConfigGet(ctx context.Context, _ string) *redis.MapStringStringCmd {
	c.mu.Lock()
	c.checks++
	policy, err, gate := c.policy, c.err, c.gate
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	cmd := redis.NewMapStringStringCmd(ctx)
	if err != nil {
		cmd.SetErr(err)
	} else {
		cmd.SetVal(map[string]string{"maxmemory": "1000", "maxmemory-policy": policy})
	}
	return cmd
}

func (c *configScripter) Info(ctx context.Context, _ ...string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx)
	cmd.SetErr(errors.New("unexpected INFO"))
	return cmd
}

func (c *configScripter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checks
}

// TestEvictionCheckOnce: concurrent first calls wait for one check; later
// calls ask nothing until EvictionRecheck has passed, then one call checks
// again and sees the change; a check without an answer (the server is
// down) decides nothing, and the next call checks again.
func TestEvictionCheckOnce(t *testing.T) {
	granted := []any{int64(1), int64(0), int64(5), int64(0), int64(0)}
	c := &configScripter{fakeScripter: fakeScripter{reply: granted}, policy: "allkeys-lru", gate: make(chan struct{})}
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	clock := newFakeClock()
	s.SetEvictionClock(clock.Now)
	r := req(1, 0, lim(10, time.Minute))

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := s.Reserve(ctx, "k", r)
			errs <- err
		})
	}
	time.Sleep(10 * time.Millisecond) // let them queue behind the first check
	close(c.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, redisstore.ErrEvictingPolicy, "no first call went unchecked")
	}
	assert.Equal(t, 1, c.count())

	c.mu.Lock()
	c.policy = "noeviction"
	c.mu.Unlock()
	clock.Advance(redisstore.EvictionRecheck - time.Second)
	_, err = s.Reserve(ctx, "k", r)
	require.ErrorIs(t, err, redisstore.ErrEvictingPolicy, "the answer holds until the recheck")
	assert.Equal(t, 1, c.count())
	clock.Advance(time.Second)
	_, err = s.Reserve(ctx, "k", r)
	require.NoError(t, err, "rechecked")
	assert.Equal(t, 2, c.count())

	// No answer: the previous verdict holds, and the next call asks again.
	clock.Advance(redisstore.EvictionRecheck)
	c.mu.Lock()
	c.err = errors.New("dial tcp: connection refused")
	c.mu.Unlock()
	_, err = s.Reserve(ctx, "k", r)
	require.NoError(t, err)
	_, err = s.Reserve(ctx, "k", r)
	require.NoError(t, err)
	assert.Equal(t, 4, c.count())
}

// BenchmarkEvictionGate: what the check costs a Reserve once it has an
// answer (an atomic load and a clock read), against EvictionOff, on a fake
// server that answers at once.
//
//	go test -run '^$' -bench EvictionGate ./store/
func BenchmarkEvictionGate(b *testing.B) {
	granted := []any{int64(1), int64(0), int64(5), int64(0), int64(0)}
	for _, check := range []redisstore.EvictionCheck{redisstore.EvictionRefuse, redisstore.EvictionOff} {
		b.Run(check.String(), func(b *testing.B) {
			c := &configScripter{fakeScripter: fakeScripter{reply: granted}, policy: "noeviction"}
			s, err := redisstore.NewRedis(c, redisstore.WithEvictionCheck(check))
			require.NoError(b, err)
			r := req(1, 0, lim(10, time.Minute))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Reserve(ctx, "k", r); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// TestEvictionCheckMiniredis: miniredis (the tests' fallback) knows neither
// CONFIG nor INFO memory: the policy is unknown, and the store runs.
func TestEvictionCheckMiniredis(t *testing.T) {
	s, err := redisstore.NewRedis(redistest.Mini(t).Client(t))
	require.NoError(t, err)
	assert.True(t, reserve(t, s, uniqueKey(t), req(1, 0, lim(10, time.Minute))).Allowed)
}
