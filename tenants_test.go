package throttle_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// tenantRule is 10 per second on one key, the tenant read from the
// X-Customer header, with weights.
func tenantRule(weights map[string]int) throttle.Rule {
	return throttle.Rule{
		Name: "tenants", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(10, time.Second)},
		Key: throttle.Fixed("gw"), Margin: throttle.NoMargin, NoDefaultPace: true,
		Tenant:  func(r *http.Request) (string, error) { return r.Header.Get("X-Customer"), nil },
		Weights: weights,
	}
}

// sendAs sends one request of tenant through tr and returns how long it
// waited.
func sendAs(t *testing.T, tr http.RoundTripper, tenant string) time.Duration {
	t.Helper()
	req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
	req.Header.Set("X-Customer", tenant)
	var resp *http.Response
	var err error
	took := elapsed(func() { resp, err = tr.RoundTrip(req) })
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return took
}

// TestTenantGoesBeforeABacklog: a customer's import queues thirty requests
// on 10 per second (this second, the next and the one after); another
// customer's request at 50ms takes the first slot of the next second, not
// one behind the import (3s), as it does without tenants. Every second holds
// at most 10 sends.
func TestTenantGoesBeforeABacklog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		tenants bool
		wait    time.Duration
	}{
		{"without tenants", false, 2950 * time.Millisecond},
		{"with tenants", true, 950 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent sendLog
				var decisions decisionLog
				r := tenantRule(nil)
				if !tc.tenants {
					r.Tenant = nil
				}
				tr := newTransport(t, sent.base(), nil, throttle.WithRule(r), decisions.option())
				var wg sync.WaitGroup
				for range 30 {
					wg.Go(func() { sendAs(t, tr, "importer") })
				}
				synctest.Wait()
				time.Sleep(50 * time.Millisecond)
				assert.Equal(t, tc.wait, sendAs(t, tr, "shop-17"))
				wg.Wait()
				assert.Equal(t, 31, sent.count())
				bumped := 0
				for _, d := range decisions.all() {
					bumped += d.Bumped
					if tc.tenants {
						assert.Contains(t, []string{"importer", "shop-17"}, d.Tenant)
					} else {
						assert.Empty(t, d.Tenant)
					}
				}
				if tc.tenants {
					// The importer's request whose slot it took goes to the
					// next second, and the one it bumps there to a new slot.
					assert.Equal(t, 2, bumped)
				}
				sent.mu.Lock()
				times := append([]time.Time(nil), sent.times...)
				sent.mu.Unlock()
				for i := range times {
					n := 0
					for _, u := range times {
						if !u.Before(times[i]) && u.Before(times[i].Add(time.Second)) {
							n++
						}
					}
					assert.LessOrEqual(t, n, 10)
				}
			})
		})
	}
}

// TestTenantWeights: two customers backlogged at once, weights 1 and 3,
// share the first two seconds' 20 slots 5 to 15; each one's requests go in
// the order they came (at one instant, either order).
func TestTenantWeights(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		type send struct {
			at     time.Time
			c, seq string
		}
		var mu sync.Mutex
		var order []send
		base := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			order = append(order, send{time.Now(), req.Header.Get("X-Customer"), req.Header.Get("X-Seq")})
			mu.Unlock()
			return okResponse(req), nil
		})
		start := time.Now()
		tr := newTransport(t, base, nil, throttle.WithRule(tenantRule(map[string]int{"big": 3})))
		var wg sync.WaitGroup
		for i := range 20 {
			for _, c := range []string{"small", "big"} {
				req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
				req.Header.Set("X-Customer", c)
				req.Header.Set("X-Seq", string(rune('a'+i)))
				wg.Go(func() {
					resp, err := tr.RoundTrip(req)
					if assert.NoError(t, err) {
						_ = resp.Body.Close()
					}
				})
				synctest.Wait() // in this order
			}
		}
		wg.Wait()
		require.Len(t, order, 40)
		big, small := 0, 0
		for _, x := range order {
			if x.at.Sub(start) < 2*time.Second {
				if x.c == "big" {
					big++
				} else {
					small++
				}
			}
		}
		assert.Equal(t, 20, big+small)
		assert.InDelta(t, 15, big, 1, "big's sends of the first 20")
		for _, x := range order {
			for _, y := range order {
				if x.c == y.c && x.seq < y.seq {
					assert.False(t, y.at.Before(x.at), "%s%s went before %s%s", y.c, y.seq, x.c, x.seq)
				}
			}
		}
	})
}

// TestTenantConfig checks the rule's tenants: refused configurations, a
// Limiter refused, and a request whose tenant cannot be derived refused with
// a *KeyError that says why, its body closed.
func TestTenantConfig(t *testing.T) {
	t.Parallel()
	for i, f := range []func(*throttle.Rule){
		func(r *throttle.Rule) { r.Tenant = nil },
		func(r *throttle.Rule) { r.Weights = map[string]int{"a": 0} },
		func(r *throttle.Rule) { r.Weights = map[string]int{"a": -2} },
		func(r *throttle.Rule) { r.Weights = map[string]int{"a": 10_001} },
		func(r *throttle.Rule) { r.Algorithm = throttle.FixedWindow },
		func(r *throttle.Rule) { r.InFlight = 2 },
		func(r *throttle.Rule) { r.Lanes, r.Lane = 2, func(*http.Request) int { return 0 } },
	} {
		r := tenantRule(map[string]int{"a": 2})
		f(&r)
		_, err := throttle.New(nil, newMemory(t), throttle.WithRule(r))
		assert.True(t, isA[*throttle.ConfigError](err), "case %d: %v", i, err)
	}
	r := tenantRule(map[string]int{"sk_live_secret": 0})
	_, err := throttle.New(nil, newMemory(t), throttle.WithRule(r))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "sk_live_secret", "a tenant's name may be a secret")

	r = tenantRule(nil)
	r.Host, r.Key = "", nil
	l, err := throttle.NewLimiter(newMemory(t), r)
	assert.Nil(t, l)
	assert.True(t, isA[*throttle.ConfigError](err), "%v", err)
	assert.Contains(t, err.Error(), "a Limiter")

	tr := newTransport(t, roundTripperFunc(func(req *http.Request) (*http.Response, error) { return okResponse(req), nil }), nil,
		throttle.WithRule(tenantRule(nil)))
	req, body := newRequest(t, context.Background(), http.MethodGet, testURL) // no X-Customer
	_, err = tr.RoundTrip(req)
	require.Error(t, err)
	assert.True(t, isA[*throttle.KeyError](err), "%v", err)
	assert.Contains(t, err.Error(), "empty tenant")
	assert.Equal(t, int32(1), body.closes.Load())
}

// TestTenantNamesNeverReachRedis: the tenants' names are hashed in the
// store; what Redis holds never contains them.
func TestTenantNamesNeverReachRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	st, err := store.NewRedis(srv.Client(t), store.WithPrefix(t.Name()+":"))
	require.NoError(t, err)
	tr := newTransport(t, roundTripperFunc(func(req *http.Request) (*http.Response, error) { return okResponse(req), nil }), st,
		throttle.WithRule(tenantRule(nil)))
	var wg sync.WaitGroup
	for _, c := range []string{"cus_AAAA1111", "cus_BBBB2222", "cus_AAAA1111"} {
		wg.Go(func() { sendAs(t, tr, c) })
	}
	wg.Wait()
	keys, err := srv.Client(t).Keys(context.Background(), t.Name()+":*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	seen := 0
	for _, k := range keys {
		assert.NotContains(t, k, "cus_")
		if !strings.HasSuffix(k, ":tenants") {
			continue
		}
		members, err := srv.Client(t).ZRange(context.Background(), k, 0, -1).Result()
		require.NoError(t, err)
		for _, m := range members {
			seen++
			assert.NotContains(t, m, "cus_")
		}
	}
	assert.Positive(t, seen, "no tenants' set found")
}

// TestTenantLargeCost: a request may cost up to the limit's N under
// tenants, as without: a cost of 5,000 on 10,000 per second is sent, on
// both stores, and neither fails as a store error (which would mark the
// store down for every rule) nor is sent uncounted.
func TestTenantLargeCost(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			st := newMemory(t)
			if name == "redis" {
				var err error
				st, err = store.NewRedis(redistest.Shared(t).Client(t), store.WithPrefix(t.Name()+":"))
				require.NoError(t, err)
			}
			r := tenantRule(nil)
			r.Limits = []throttle.Limit{throttle.Per(10_000, time.Second)}
			r.Cost = func(*http.Request) int { return 5_000 }
			var log decisionLog
			tr := newTransport(t, roundTripperFunc(func(req *http.Request) (*http.Response, error) { return okResponse(req), nil }), st,
				throttle.WithRule(r), throttle.WithFailOpen(), log.option())
			sendAs(t, tr, "cus_big")
			d := log.last(t)
			assert.Equal(t, throttle.Sent, d.Outcome, "%v", d.Err)
			assert.Equal(t, 5_000, d.Cost)
		})
	}
}
