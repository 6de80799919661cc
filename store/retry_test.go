package store_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/redisstore"
	"github.com/throttle-go/throttle/store/internal/script"
)

// replyDropper is a TCP proxy to a Redis that, while dropping, forwards
// commands but throws away the replies on the connections open when the
// dropping began: the commands run and the client times out reading, as on a
// connection that stalled. New connections work, so a client that retries on
// a new connection gets through.
type replyDropper struct {
	l      net.Listener
	target string
	// dropBelow: replies are dropped on connections numbered below it.
	dropBelow atomic.Int64
	accepted  atomic.Int64
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     []net.Conn
}

func (p *replyDropper) drop(on bool) {
	if on {
		p.dropBelow.Store(p.accepted.Load())
	} else {
		p.dropBelow.Store(0)
	}
}

func newReplyDropper(t *testing.T, target string) *replyDropper {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &replyDropper{l: l, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *replyDropper) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		id := p.accepted.Add(1) - 1
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close() })
		p.wg.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && id >= p.dropBelow.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					_ = c.Close()
					return
				}
			}
		})
	}
}

// TestRedisCancelNotRetried is limit R1 of the README, closed: a Cancel
// whose reply is lost is not sent again by go-redis, so it cannot remove the
// entries of another reservation at the same slot. The control shows that
// the same client does re-send an ordinary script call in that situation.
func TestRedisCancelNotRetried(t *testing.T) {
	srv := sharedOrSkip(t)
	direct := srv.Client(t)
	require.NoError(t, direct.ScriptLoad(ctx, script.Cancel()).Err())
	proxy := newReplyDropper(t, srv.Addr)
	// go-redis defaults: 3 retries after a read timeout.
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.l.Addr().String(), ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = viaProxy.Close() })

	clock := newFakeClock()
	s, err := redisstore.NewRedis(viaProxy, redisstore.WithClientTime(clock.Now))
	require.NoError(t, err)
	r := req(1, 0, lim(10, time.Second))

	setup := func(key string) contract.Reservation {
		a := reserve(t, s, key, r)
		b := reserve(t, s, key, r)
		require.Equal(t, a.Slot, b.Slot, "two reservations share a slot")
		require.EqualValues(t, 2, direct.LLen(ctx, s.RedisKey(key)).Val())
		return a
	}

	// Control: an ordinary EVALSHA of the cancel script through the proxy, reply
	// dropped: go-redis sends it again, and it removes both entries.
	key := uniqueKey(t)
	a := setup(key)
	proxy.drop(true)
	err = redis.NewScript(script.Cancel()).Run(ctx, viaProxy, []string{s.RedisKey(key)}, a.Slot, 1).Err()
	proxy.drop(false)
	require.NoError(t, err, "the retry on a new connection succeeded")
	require.EqualValues(t, 0, direct.LLen(ctx, s.RedisKey(key)).Val(),
		"control: the retried call ran more than once and removed the other reservation's entry")

	// The store's Cancel: reply dropped, an error, and it ran once.
	key = uniqueKey(t)
	a = setup(key)
	proxy.drop(true)
	err = s.Cancel(ctx, a)
	proxy.drop(false)
	require.Error(t, err)
	assert.EqualValues(t, 1, direct.LLen(ctx, s.RedisKey(key)).Val(),
		"the Cancel ran once: the other reservation's entry is still there")
}
