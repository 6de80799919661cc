package store_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// pipelineHook counts the pipelines a client sends and their sizes, and can
// hold them before or after they reach the server.
type pipelineHook struct {
	pipelines, commands, largest atomic.Int64
	mu                           sync.Mutex
	before, after                chan struct{} // closed: pass
}

type hookSeen struct{}

func (h *pipelineHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(hookSeen{}) != nil {
			return next(ctx, cmds) // go-redis may run the hooks twice over
		}
		if len(cmds) == 0 || (cmds[0].Name() != "evalsha" && cmds[0].Name() != "eval") {
			return next(ctx, cmds) // a new connection's handshake
		}
		ctx = context.WithValue(ctx, hookSeen{}, true)
		h.pipelines.Add(1)
		h.commands.Add(int64(len(cmds)))
		for {
			l := h.largest.Load()
			if int64(len(cmds)) <= l || h.largest.CompareAndSwap(l, int64(len(cmds))) {
				break
			}
		}
		h.mu.Lock()
		before, after := h.before, h.after
		h.mu.Unlock()
		if before != nil {
			<-before
		}
		err := next(ctx, cmds)
		if after != nil {
			<-after
		}
		return err
	}
}

func (h *pipelineHook) hold(before, after chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.before, h.after = before, after
}

func batchedStore(t *testing.T) (*redisstore.Redis, *redis.Client, *pipelineHook) {
	t.Helper()
	c := realRedis(t)
	h := &pipelineHook{}
	c.AddHook(h)
	s, err := redisstore.NewRedis(c, redisstore.WithBatching(64))
	require.NoError(t, err)
	return s, c, h
}

// TestRedisBatching: concurrent reservations share pipelines, every caller
// gets its own answer, and the limit holds.
func TestRedisBatching(t *testing.T) {
	s, c, h := batchedStore(t)
	keys := []string{uniqueKey(t), uniqueKey(t), uniqueKey(t), uniqueKey(t)}
	const callers, each, n = 32, 50, 100
	var allowed [4]atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := (g + i) % len(keys)
				res, err := s.Reserve(ctx, keys[k], req(1, 0, lim(n, time.Hour)))
				if !assert.NoError(t, err) {
					return
				}
				if res.Allowed {
					allowed[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for k, key := range keys {
		assert.EqualValues(t, n, allowed[k].Load(), "key %d: exactly N of the %d calls are allowed", k, callers*each/len(keys))
		assert.EqualValues(t, n, c.LLen(ctx, s.RedisKey(key)).Val(), "key %d: one entry per allowed call", k)
	}
	assert.GreaterOrEqual(t, h.commands.Load(), int64(callers*each), "every call went through a pipeline (and again with EVAL after a NOSCRIPT)")
	assert.Greater(t, h.largest.Load(), int64(1), "some pipeline carried several calls")
	assert.Less(t, h.pipelines.Load(), int64(callers*each), "fewer round trips than calls")
	t.Logf("%d calls in %d pipelines (largest %d)", h.commands.Load(), h.pipelines.Load(), h.largest.Load())
}

// TestRedisBatchingAbandoned: a caller whose context ends while its call
// waits for a batch returns at once; a call not yet sent is never sent, and
// one granted after its caller left is cancelled.
func TestRedisBatchingAbandoned(t *testing.T) {
	s, c, h := batchedStore(t)
	r := req(1, 0, lim(10, time.Hour))
	reserve(t, s, uniqueKey(t), r) // the script is loaded: no NOSCRIPT round below
	p0 := h.pipelines.Load()
	errc := make(chan error, 4)
	reserveIn := func(ctx context.Context, key string) {
		go func() {
			_, err := s.Reserve(ctx, key, r)
			errc <- err
		}()
	}

	// Two batches held before the server: the calls after them queue.
	before, after := make(chan struct{}), make(chan struct{})
	release := func(ch chan struct{}) {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	t.Cleanup(func() { h.hold(nil, nil); release(before); release(after) })
	h.hold(before, nil)
	reserveIn(ctx, uniqueKey(t))
	reserveIn(ctx, uniqueKey(t))
	require.Eventually(t, func() bool { return h.pipelines.Load() == p0+2 }, 5*time.Second, time.Millisecond)

	// Queued, then left before its batch is sent: never sent.
	never := uniqueKey(t)
	nctx, cancelNever := context.WithCancel(ctx)
	reserveIn(nctx, never)
	time.Sleep(20 * time.Millisecond) // let it queue
	cancelNever()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled, "the caller that left returns its context's error")
	case <-time.After(5 * time.Second):
		t.Fatal("the caller that left did not return")
	}

	// Queued with another, sent, held after the server ran it, left: the
	// reservation it was granted is cancelled; the other is answered.
	left, stayed := uniqueKey(t), uniqueKey(t)
	lctx, cancelLeft := context.WithCancel(ctx)
	reserveIn(lctx, left)
	reserveIn(ctx, stayed)
	time.Sleep(20 * time.Millisecond) // let them queue
	h.hold(nil, after)
	release(before)
	for range 2 {
		require.NoError(t, <-errc, "the held batches are answered")
	}
	require.Eventually(t, func() bool { return c.LLen(ctx, s.RedisKey(left)).Val() == 1 }, 5*time.Second, time.Millisecond,
		"the queued batch ran")
	cancelLeft()
	require.ErrorIs(t, <-errc, context.Canceled)
	h.hold(nil, nil)
	release(after)
	require.NoError(t, <-errc, "the caller that stayed is answered")
	assert.EqualValues(t, 1, c.LLen(ctx, s.RedisKey(stayed)).Val())
	assert.Eventually(t, func() bool { return c.Exists(ctx, s.RedisKey(left)).Val() == 0 }, 5*time.Second, 5*time.Millisecond,
		"the reservation granted to the caller that left was cancelled")
	assert.Zero(t, c.Exists(ctx, s.RedisKey(never)).Val(), "the call whose caller left before it was sent never ran")
	assert.EqualValues(t, p0+3, h.pipelines.Load(), "two held batches, one queued")
}

// TestRedisBatchingScriptCacheLoss: after SCRIPT FLUSH the batch sends the
// calls again with EVAL.
func TestRedisBatchingScriptCacheLoss(t *testing.T) {
	s, c, _ := batchedStore(t)
	key := uniqueKey(t)
	reserve(t, s, key, req(1, 0, lim(100, time.Hour)))
	require.NoError(t, c.ScriptFlush(ctx).Err())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Reserve(ctx, key, req(1, 0, lim(100, time.Hour)))
			assert.NoError(t, err)
			assert.True(t, res.Allowed)
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 9, c.LLen(ctx, s.RedisKey(key)).Val())
}

// TestRedisBatchingConfig: the option's bounds and the clients it needs.
func TestRedisBatchingConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Dialer: func(context.Context, string, string) (net.Conn, error) {
		return nil, net.ErrClosed
	}})
	defer c.Close()
	for _, max := range []int{-1, 0, 1, redisstore.MaxBatch + 1} {
		_, err := redisstore.NewRedis(c, redisstore.WithBatching(max))
		assert.ErrorContains(t, err, "WithBatching", "max %d", max)
	}
	_, err := redisstore.NewRedis(c, redisstore.WithBatching(2), redisstore.WithReplicaAck(1, time.Second))
	assert.ErrorContains(t, err, "cannot be combined")
	_, err = redisstore.NewRedis(fakeScripter{}, redisstore.WithBatching(2))
	assert.ErrorContains(t, err, "pipelines")
	_, err = redisstore.NewRedis(c, redisstore.WithBatching(redisstore.MaxBatch))
	assert.NoError(t, err)
}
