package throttle_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// TestBadKeyIsOneKey: another program SETs a string where one rate key's log
// lives. Failing closed and under WithFailOpen, with a Redis store on a real server:
//
//   - when the store may repair the key, the next request on it is
//     answered (healed at once) and sent, counted;
//   - when it may not (its user lacks DEL), every request on that key fails
//     with store.ErrKeyState, is never sent, and is no StoreError;
//
// and in both cases the requests on another key are sent and counted, none
// is "not tried" or sent uncounted (FailedOpen).
func TestBadKeyIsOneKey(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	rule := append(strings.Fields(store.ACLRule(store.DefaultPrefix)), "-del")
	require.NoError(t, admin.Do(context.Background(), append([]any{"acl", "setuser", "nodel", "on", ">pw"}, anys(rule)...)...).Err())

	for _, policy := range []storePolicy{failClosed, failOpen} {
		for _, repairable := range []bool{true, false} {
			name := string(policy) + "/repairable"
			if !repairable {
				name = string(policy) + "/unrepairable"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				client := srv.Client(t)
				if !repairable {
					client = redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nodel", Password: "pw"})
					t.Cleanup(func() { _ = client.Close() })
				}
				st, err := store.NewRedis(client, store.WithPrefix(store.DefaultPrefix+name+":"))
				require.NoError(t, err)
				var mu sync.Mutex
				sent := map[string]int{}
				var decisions []throttle.Decision
				base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
					mu.Lock()
					sent[r.URL.Host]++
					mu.Unlock()
					return okResponse(r), nil
				})
				tr := newTransport(t, base, st, append(policy.options(0),
					throttle.WithDefault(throttle.Rule{Name: "all", Key: throttle.ByHost(), Limits: []throttle.Limit{throttle.PerMinute(10000)}, Margin: throttle.NoMargin, NoDefaultPace: true}), // one key: the log
					throttle.WithOnDecision(func(d throttle.Decision) {
						mu.Lock()
						defer mu.Unlock()
						decisions = append(decisions, d)
					}))...)
				do := func(host string) error {
					req, err := http.NewRequest(http.MethodGet, "https://"+host+"/x", nil)
					require.NoError(t, err)
					resp, err := tr.RoundTrip(req)
					if err == nil {
						resp.Body.Close()
					}
					return err
				}
				require.NoError(t, do("a.example"))
				logs, err := admin.Keys(ctx, store.DefaultPrefix+name+":{*}").Result() // the logs: not their seen marks, nor the published rules
				require.NoError(t, err)
				require.Len(t, logs, 1)
				require.NoError(t, admin.Set(ctx, logs[0], "not a log", 0).Err())
				// Without its seen mark the repaired key starts afresh; with it,
				// it would wait out a window (a log lost: store's lost_test.go).
				require.NoError(t, admin.Del(ctx, logs[0]+":seen").Err())
				sent["a.example"] = 0

				for range 20 {
					errA := do("a.example")
					if repairable {
						require.NoError(t, errA)
					} else {
						require.ErrorIs(t, errA, store.ErrKeyState)
						assert.NotErrorIs(t, errA, throttle.ErrStoreUnavailable)
						assert.Contains(t, errA.Error(), "WRONGTYPE")
					}
					require.NoError(t, do("b.example"))
				}
				mu.Lock()
				defer mu.Unlock()
				assert.Equal(t, 20, sent["b.example"])
				for _, d := range decisions {
					var se *throttle.StoreError
					assert.NotErrorAs(t, d.Err, &se, "no request met a store marked down")
					assert.NotEqual(t, throttle.FailedOpen, d.Outcome, "nothing sent uncounted")
				}
				all, err := admin.Keys(ctx, store.DefaultPrefix+name+":{*}").Result() // the logs: not their seen marks, nor the published rules
				require.NoError(t, err)
				require.Len(t, all, 2)
				logB := all[0]
				if logB == logs[0] {
					logB = all[1]
				}
				assert.EqualValues(t, 20, admin.LLen(ctx, logB).Val(), "every send on b counted")
				if repairable {
					assert.Equal(t, 20, sent["a.example"])
					assert.EqualValues(t, 20, admin.LLen(ctx, logs[0]).Val(), "every send on a counted after the repair")
				} else {
					assert.Equal(t, 0, sent["a.example"])
					assert.Equal(t, "string", admin.Type(ctx, logs[0]).Val())
				}
			})
		}
	}
}

// TestEvictingRedisIsAStoreFailure: a store on a server that may evict its
// keys fails every Reserve with store.ErrEvictingPolicy, which the
// transport's failure policy handles as a store failure: by default it refuses,
// naming the policy.
func TestEvictingRedisIsAStoreFailure(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	st, err := store.NewRedis(srv.Client(t))
	require.NoError(t, err)
	tr := newTransport(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil }), st,
		throttle.WithDefault(throttle.Rule{Name: "all", Key: throttle.ByHost(), Limits: []throttle.Limit{throttle.PerMinute(10)}}))
	req, err := http.NewRequest(http.MethodGet, "https://a.example/x", nil)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, throttle.ErrStoreUnavailable)
	require.ErrorIs(t, err, store.ErrEvictingPolicy)
	assert.Contains(t, err.Error(), "allkeys-lru")
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

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

// TestRefusedRedisIsNotATimeout: the quick start against a port where
// nothing listens (go-redis's default options) is refused with a
// *StoreError that says the connection was refused and matches
// syscall.ECONNREFUSED and *net.OpError, through the *url.Error of
// http.Client, after the first refused dial rather than after the store
// timeout (an hour here; go-redis alone dials 5 times per attempt over 4
// attempts). The request's deadline is only a guard. The store is then
// marked down, and the next request is not tried and says why.
func TestRefusedRedisIsNotATimeout(t *testing.T) {
	port, err := redistest.FreePort()
	require.NoError(t, err)
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), Password: secret})
	t.Cleanup(func() { _ = client.Close() })
	dials := new(atomic.Int32)
	client.AddHook(dialCounter{dials})
	st, err := store.NewRedis(client)
	require.NoError(t, err)
	var sent atomic.Int32
	tr := newTransport(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return okResponse(r), nil
	}), st, throttle.WithStoreTimeout(time.Hour),
		throttle.WithDefault(throttle.Rule{Name: "all", Key: throttle.ByHost(), Limits: []throttle.Limit{throttle.PerSecond(100)}}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	get := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/x", nil)
		require.NoError(t, err)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	err = get()
	n := dials.Load()
	require.Error(t, err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	var se *throttle.StoreError
	require.ErrorAs(t, err, &se)
	assert.False(t, se.NotTried)
	assert.False(t, se.Timeout)
	var op *net.OpError
	assert.ErrorAs(t, err, &op)
	assert.Contains(t, err.Error(), "connection refused")
	assert.NotContains(t, err.Error(), secret)
	assert.Less(t, n, int32(5), "dial attempts before the refusal was reported: fewer than one go-redis dial sequence")

	err = get() // within the first probe's backoff of 40ms at the least
	require.ErrorAs(t, err, &se)
	if se.NotTried {
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	}
	assert.Zero(t, sent.Load())
}

// TestSlowRedisIsATimeout: a server that accepts connections and never
// answers still reads as no answer within WithStoreTimeout, not as a
// refusal.
func TestSlowRedisIsATimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	client := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	st, err := store.NewRedis(client)
	require.NoError(t, err)
	tr := newTransport(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil }), st,
		throttle.WithStoreTimeout(50*time.Millisecond),
		throttle.WithDefault(throttle.Rule{Name: "all", Key: throttle.ByHost(), Limits: []throttle.Limit{throttle.PerSecond(100)}}))
	req, err := http.NewRequest(http.MethodGet, "https://api.example.com/x", nil)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	var se *throttle.StoreError
	require.ErrorAs(t, err, &se)
	assert.True(t, se.Timeout)
	assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
	assert.NotErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Contains(t, err.Error(), "no answer within 50ms (WithStoreTimeout)")
}
