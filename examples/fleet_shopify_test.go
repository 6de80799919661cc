//go:build integration

// The Shopify fleet test: three Transports, each with its own engine, of
// eight workers each, sharing one real redis-server, against one fake
// Shopify GraphQL API (internal/fakeapi): a leaky bucket of query cost
// that takes a query's requested cost when it arrives and gives back the
// difference with its actual cost when it has run, and answers THROTTLED
// (HTTP 200) when the requested cost exceeds what is left. The throttle
// reserves the requested cost and settles to extensions.cost
// (ShopifyGraphQLCost). A bucket of B points restored at R a second never
// throttles a fleet that spends at most B points in any window of B/R:
// that is the rule. The test asserts no THROTTLED, and logs the share of
// the restore rate used after the first window. More runs:
//
//	FLEET_SHOPIFY_RUNS=10 go test -tags integration -run TestFleetShopify -v ./examples
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakeapi"
	"github.com/throttle-go/throttle/profiles"
	"github.com/throttle-go/throttle/store"
)

const (
	shopifyBucket  = 2000 // maximumAvailable
	shopifyRestore = 1000 // restoreRate, points a second: Shopify Plus
	// shopifyWindow is the window of the rule, the time to restore a full
	// bucket.
	shopifyWindow  = shopifyBucket * time.Second / shopifyRestore
	shopifyWindows = 4 // measured after the first window
	shopifyFleet   = 3
	shopifyWorkers = 8
)

func TestFleetShopify(t *testing.T) {
	runs := 1
	if v := os.Getenv("FLEET_SHOPIFY_RUNS"); v != "" {
		var err error
		runs, err = strconv.Atoi(v)
		require.NoError(t, err, "FLEET_SHOPIFY_RUNS")
	}
	var shares []float64
	for run := range runs {
		share, s := runShopifyFleet(t)
		t.Logf("run %d: %.1f %% of the restore rate after the first window; %d queries, %d THROTTLED, %d points requested, %d spent",
			run+1, 100*share, s.Queries, s.Throttled, s.Requested, s.Actual)
		require.Zero(t, s.Throttled, "the fleet kept the bucket")
		shares = append(shares, share)
	}
	t.Logf("median %.1f %% of the restore rate over %d runs (%.1f %% to %.1f %%)", 100*median(shares), runs,
		100*slices.Min(shares), 100*slices.Max(shares))
}

// runShopifyFleet runs the fleet against a fresh Redis and API, and returns
// the points spent in the windows after the first over what the bucket
// restored in them.
func runShopifyFleet(t *testing.T) (float64, fakeapi.ShopifyStats) {
	t.Helper()
	srv, rdb := startRedis(t)
	require.True(t, srv.Real, "a real redis-server")
	fake, err := fakeapi.NewShopify(fakeapi.ShopifyConfig{Bucket: shopifyBucket, RestoreRate: shopifyRestore,
		QueryTime: 30 * time.Millisecond, Seed: uint64(time.Now().UnixNano())})
	require.NoError(t, err)
	api := httptest.NewServer(fake)
	defer api.Close()
	u, err := url.Parse(api.URL)
	require.NoError(t, err)
	endpoint := api.URL + "/admin/api/2025-01/graphql.json"

	rule := throttle.Rule{
		Host: u.Host, Key: throttle.Fixed("shop-1"), MaxWait: shopifyWindow / 10,
		Limits: []throttle.Limit{throttle.Per(10_000, shopifyWindow), throttle.Per(shopifyBucket, shopifyWindow).Of("points")},
		Costs:  map[string]func(*http.Request) int{"points": requestedCost},
		Actual: profiles.ShopifyGraphQLCost("points"),
	}
	d := (shopifyWindows+1)*shopifyWindow + 500*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for p := range shopifyFleet {
		st, err := store.NewRedis(rdb)
		require.NoError(t, err)
		conns := http.DefaultTransport.(*http.Transport).Clone()
		conns.MaxIdleConnsPerHost = shopifyWorkers
		defer conns.CloseIdleConnections()
		tr, err := throttle.New(conns, st, throttle.WithRule(rule))
		require.NoError(t, err)
		client := &http.Client{Transport: tr}
		for w := range shopifyWorkers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(p), uint64(w)))
				for ctx.Err() == nil {
					body := fmt.Sprintf(`{"query":"query($first:Int!){products(first:$first){edges{node{id title}}}}","variables":{"first":%d}}`,
						10+rng.IntN(91))
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader([]byte(body)))
					if err != nil {
						panic(err)
					}
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					var le *throttle.LimitError
					switch {
					case err == nil:
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					case errors.As(err, &le):
						sleepCtx(ctx, le.RetryAfter) // sent again after its RetryAfter
					}
				}
			})
		}
	}
	wg.Wait()
	s := fake.Stats()
	from := s.First.Add(shopifyWindow)
	spent := fake.Charged(from, from.Add(shopifyWindows*shopifyWindow))
	return float64(spent) / (shopifyWindows * shopifyWindow.Seconds() * shopifyRestore), s
}

// requestedCost is the requested cost of the query in the request's body:
// products(first: n) costs n + 2, as Shopify computes it before running it.
func requestedCost(r *http.Request) int {
	body, err := r.GetBody()
	if err != nil {
		return -1
	}
	var q struct {
		Variables struct {
			First int `json:"first"`
		} `json:"variables"`
	}
	if json.NewDecoder(body).Decode(&q) != nil {
		return -1
	}
	return fakeapi.ShopifyRequested(q.Variables.First)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
