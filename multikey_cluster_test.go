//go:build integration

package throttle_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

// TestAlsoAcrossSlotsFleet is the measurement of docs/keys.md: 1,000 token
// keys and one app key per request on a 3-master Redis Cluster, against an
// upstream that limits each token and the app. Without a shared hash tag
// the tokens' logs spread over every master and each request costs one
// script call per slot (two here) plus its moves; with the app as the tag
// every log is on one master and each request costs one call. Both answer
// no 429. It logs, for each, the logs per master and the script calls per
// request, counted by a go-redis hook.
func TestAlsoAcrossSlotsFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	cl := redistest.SharedCluster(t)
	const tokens, tokenN, appN, w, run, workers = 1000, 4, 150, 2 * time.Second, 6 * time.Second, 24
	for _, tagged := range []bool{false, true} {
		t.Run(fmt.Sprintf("hashtag=%t", tagged), func(t *testing.T) {
			client := cl.Client(t)
			var scripts, all atomic.Int64
			client.AddHook(scriptCounter{&scripts, &all})
			prefix := fmt.Sprintf("fleet%d%t:", time.Now().UnixNano(), tagged)
			st, err := store.NewRedis(client, store.WithPrefix(prefix))
			require.NoError(t, err)

			up, err := throttletest.NewUpstream(throttletest.Config{
				N: tokenN, Window: w, Key: func(r *http.Request) string { return r.URL.Query().Get("access_token") },
				Also: []throttletest.Config{{N: appN, Window: w, Key: func(*http.Request) string { return "app" }}},
			})
			require.NoError(t, err)
			srv := throttletest.NewServer(up) // counts arrivals when they reached its socket, not when this test binary got round to them
			defer srv.Close()
			host := strings.TrimPrefix(srv.URL, "http://")
			tr, err := throttle.New(nil, st, throttle.WithRule(throttle.Rule{
				Name: "api", Host: host, Key: throttle.ByQuery("access_token"),
				Limits: []throttle.Limit{throttle.Per(tokenN, w)}, MaxWait: 10 * time.Second,
				Also: []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("my-app"), HashTag: tagged,
					Limits: []throttle.Limit{throttle.Per(appN, w)}}},
			}))
			require.NoError(t, err)
			client2 := &http.Client{Transport: tr}
			defer tr.CloseIdleConnections()

			scripts.Store(0)
			all.Store(0)
			var sent, failed atomic.Int64
			end := time.Now().Add(run)
			var wg sync.WaitGroup
			for i := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), 25))
					for time.Now().Before(end) {
						tok := fmt.Sprintf("token-%04d", rng.IntN(tokens))
						req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x?access_token="+url.QueryEscape(tok), nil)
						resp, err := client2.Do(req)
						if err != nil {
							failed.Add(1)
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						sent.Add(1)
					}
				}()
			}
			wg.Wait()
			up.RequireNoRejections(t)
			assert.Zero(t, failed.Load(), "no request failed")
			ust := up.Stats()
			// A slot given back (a retake: the process woke too late) is
			// one cancel per slot, and its request reserves again.
			slots := int64(2)
			if tagged {
				slots = 1
			}
			retakes := int64(tr.Stats().Total().Retakes)
			reservations := sent.Load() + retakes
			t.Logf("hashtag=%t: %d requests sent in %s (the app's limit: %d per %s), upstream accepted=%d 429=%d; "+
				"script calls %d = %.3f per request sent; %d retakes: %.3f calls per reservation",
				tagged, sent.Load(), time.Since(end.Add(-run)).Round(time.Millisecond), appN, w, ust.Total.Accepted, ust.Total.Rejected,
				scripts.Load(), float64(scripts.Load())/float64(sent.Load()), retakes,
				float64(scripts.Load()-slots*retakes)/float64(reservations))
			if !tagged {
				// Where the 1,000 tokens' logs live: the master of each
				// one's Redis key, as a request names it.
				per := map[string]int{}
				for i := range tokens {
					ck, err := operator.CredentialKey("query:access_token", fmt.Sprintf("token-%04d", i))
					require.NoError(t, err)
					sk, err := operator.StoreKey(tr, "api", ck)
					require.NoError(t, err)
					m, err := cl.MasterOf(context.Background(), prefix+"{"+sk+"}")
					require.NoError(t, err)
					per[m]++
				}
				sk, err := operator.StoreKey(tr, "api", "my-app")
				require.NoError(t, err)
				sk = strings.Replace(sk, "api:", "api:app:", 1)
				m, err := cl.MasterOf(context.Background(), prefix+"{"+sk+"}")
				require.NoError(t, err)
				t.Logf("hashtag=false: the %d tokens' logs per master: %v; the app's log on %s", tokens, per, m)
				assert.Len(t, per, 3)
			}

			// Where the logs are: each master's keys under the prefix.
			nodes, err := cl.Nodes(context.Background())
			require.NoError(t, err)
			var lines []string
			masters, withTokens := 0, 0
			for _, n := range nodes {
				if n.Role != redistest.Master {
					continue
				}
				masters++
				c := redis.NewClient(&redis.Options{Addr: n.Addr})
				keys, err := c.Keys(context.Background(), prefix+"*").Result()
				_ = c.Close()
				require.NoError(t, err)
				logs, app := 0, 0
				for _, k := range keys {
					switch {
					case strings.HasPrefix(k, prefix+"rules"), strings.HasSuffix(k, ":pace"),
						strings.HasSuffix(k, ":p"), strings.HasSuffix(k, ":seen"):
						// the published rules; a log's pace, feedback or seen mark
					case strings.Contains(k, ":app:"):
						app++
					default:
						logs++
					}
				}
				if logs > 0 {
					withTokens++
				}
				lines = append(lines, fmt.Sprintf("%s: %d token logs, %d app log", n.Addr, logs, app))
			}
			sort.Strings(lines)
			t.Logf("hashtag=%t: logs per master: %s", tagged, strings.Join(lines, "; "))
			require.Equal(t, 3, masters)
			if tagged {
				assert.Equal(t, 1, withTokens, "one tag: every log on one master")
			} else {
				assert.Equal(t, 3, withTokens, "no shared tag: the tokens' logs on every master")
			}
		})
	}
}

// scriptCounter counts the script calls (EVALSHA, EVAL) and all commands a
// client sends.
type scriptCounter struct{ scripts, all *atomic.Int64 }

func (scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h scriptCounter) count(cmd redis.Cmder) {
	h.all.Add(1)
	if n := cmd.Name(); n == "evalsha" || n == "eval" {
		h.scripts.Add(1)
	}
}
