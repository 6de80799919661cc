package throttle_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// TestBadKeyIsOneKey: another program SETs a string where one rate key's log
// lives. Under FailClosed and FailOpen, with a Redis store on a real server:
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

	for _, policy := range []throttle.StoreFailure{throttle.FailClosed, throttle.FailOpen} {
		for _, repairable := range []bool{true, false} {
			name := policy.String() + "/repairable"
			if !repairable {
				name = policy.String() + "/unrepairable"
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
				tr := newTransport(t, base, st, throttle.WithStoreFailure(policy),
					throttle.WithDefault(throttle.Rule{Name: "all", Key: throttle.ByHost(), Limits: []throttle.Limit{throttle.PerMinute(10000)}, Margin: throttle.NoMargin, NoDefaultPace: true}), // one key: the log
					throttle.WithOnDecision(func(d throttle.Decision) {
						mu.Lock()
						defer mu.Unlock()
						decisions = append(decisions, d)
					}))
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
				logs, err := admin.Keys(ctx, store.DefaultPrefix+name+":*").Result()
				require.NoError(t, err)
				require.Len(t, logs, 1)
				require.NoError(t, admin.Set(ctx, logs[0], "not a log", 0).Err())
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
				all, err := admin.Keys(ctx, store.DefaultPrefix+name+":*").Result()
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
// transport's failure policy handles as a store failure: FailClosed refuses,
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
