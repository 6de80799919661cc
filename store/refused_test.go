package store_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// dialCounter is a go-redis hook that counts dial attempts.
type dialCounter struct{ n *atomic.Int32 }

func (d dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// closedPortClient is a go-redis client with its default options on a
// loopback port where nothing listens, and the count of its dial attempts.
func closedPortClient(t *testing.T) (*redis.Client, *atomic.Int32) {
	port, err := redistest.FreePort()
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { _ = c.Close() })
	dials := new(atomic.Int32)
	c.AddHook(dialCounter{dials})
	return c, dials
}

// TestRedisRefused: against a port where nothing listens, a Reserve with
// go-redis's default options fails with the refused dial as it is
// (errors.Is syscall.ECONNREFUSED, errors.As *net.OpError), after its first
// refused dial: go-redis alone dials 5 times per attempt over 4 attempts, and
// the eviction check's command as many. The context's deadline is only a
// guard; the call must end before it, with the refusal.
func TestRedisRefused(t *testing.T) {
	c, dials := closedPortClient(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err = s.Reserve(ctx, "k", req(1, 0, lim(10, time.Second)))
	n := dials.Load()
	require.Error(t, err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	var op *net.OpError
	assert.ErrorAs(t, err, &op)
	assert.Contains(t, err.Error(), "connection refused")
	assert.Less(t, n, int32(5), "dial attempts before the refusal was reported: fewer than one go-redis dial sequence")

	// Cancel and the feedback calls say the same.
	err = s.Pause(ctx, "k", time.Second)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.False(t, errors.Is(err, context.DeadlineExceeded))
}
