package fakeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// What Shopify documents, as read on 2026-08-27 (shopify.dev/docs/apps/
// build/apis/graphql-admin/rate-limits and docs/api/usage/limits):
//
//   - The GraphQL Admin API limits each app and store by calculated query
//     cost with a leaky bucket: a bucket of maximumAvailable points,
//     restored continuously at restoreRate points a second (100 for the
//     Standard plan, 1,000 for Plus).
//   - A query's requested cost, computed from the query before it runs
//     (a connection costs its `first` times its node's cost, plus 2), is
//     taken from the bucket when it arrives; once it has run, the
//     difference with its actual cost (the nodes it returned) is given
//     back.
//   - Every response carries extensions.cost {requestedQueryCost,
//     actualQueryCost, throttleStatus {maximumAvailable,
//     currentlyAvailable, restoreRate}}.
//   - A query whose requested cost exceeds what is available is not run:
//     the answer has errors [{"message":"Throttled","extensions":
//     {"code":"THROTTLED"}}] and actualQueryCost null. This fake answers it
//     with HTTP 200, as a GraphQL error, and counts it.
//
// The fake serves one query, products(first: $first) { edges { node { id
// title } } }, whose requested cost is ShopifyRequested(first), and returns
// 10 % to 100 % of first nodes: its actual cost.

// ShopifyConfig configures NewShopify.
type ShopifyConfig struct {
	// Bucket is maximumAvailable, the bucket's size in points; RestoreRate
	// the points restored per second. Both must be positive.
	Bucket, RestoreRate int
	// QueryTime is how long a query runs before its answer (and refund).
	QueryTime time.Duration
	// Seed seeds the number of nodes returned.
	Seed uint64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ShopifyStats are the counts of a Shopify fake.
type ShopifyStats struct {
	// Queries counts the queries received, Throttled those answered
	// THROTTLED.
	Queries, Throttled int
	// Requested and Actual sum the requested and actual costs of the
	// queries run.
	Requested, Actual int
	// First is the arrival of the first query run.
	First time.Time
}

// Shopify is a fake Shopify GraphQL Admin API, POST …/graphql.json. It is an
// http.Handler, safe for concurrent use.
type Shopify struct {
	cfg ShopifyConfig

	mu        sync.Mutex
	rng       *rand.Rand
	available float64
	at        time.Time // when available was last restored
	runs      []spent   // every query run, for Charged
	stats     ShopifyStats
}

// spent is a query run: when it arrived and what it finally cost.
type spent struct {
	at   time.Time
	cost *int
}

// NewShopify returns a fake Shopify API with a full bucket.
func NewShopify(cfg ShopifyConfig) (*Shopify, error) {
	switch {
	case cfg.Bucket < 1 || cfg.RestoreRate < 1:
		return nil, fmt.Errorf("fakeapi: Bucket and RestoreRate must be positive, not %d and %d", cfg.Bucket, cfg.RestoreRate)
	case cfg.QueryTime < 0:
		return nil, errors.New("fakeapi: QueryTime must not be negative")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Shopify{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 3)), available: float64(cfg.Bucket), at: cfg.Now()}, nil
}

// ShopifyRequested is the requested cost of the fake's query: first
// products, one point each, plus 2 for the connection.
func ShopifyRequested(first int) int { return first + 2 }

// Stats returns the counts so far.
func (s *Shopify) Stats() ShopifyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Charged returns the points the bucket finally took for the queries that
// arrived in [from, to): their actual cost (their requested cost while
// they run).
func (s *Shopify) Charged(from, to time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.runs {
		if !r.at.Before(from) && r.at.Before(to) {
			n += *r.cost
		}
	}
	return n
}

// ServeHTTP answers a POST of {"query": …, "variables": {"first": n}}.
func (s *Shopify) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Query     string `json:"query"`
		Variables struct {
			First int `json:"first"`
		} `json:"variables"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&q) != nil ||
		q.Variables.First < 1 || q.Variables.First > 250 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"errors":[{"message":"this fake takes a POST of products(first: $first), first from 1 to 250"}]}`))
		return
	}
	requested := ShopifyRequested(q.Variables.First)

	s.mu.Lock()
	s.restore()
	s.stats.Queries++
	if s.available < float64(requested) {
		s.stats.Throttled++
		cost := s.cost(requested, nil)
		s.mu.Unlock()
		writeJSON(w, map[string]any{
			"errors": []any{map[string]any{"message": "Throttled", "extensions": map[string]any{
				"code": "THROTTLED", "documentation": "https://shopify.dev/api/usage/limits"}}},
			"extensions": map[string]any{"cost": cost},
		})
		return
	}
	now := s.cfg.Now()
	if s.stats.Queries-s.stats.Throttled == 1 {
		s.stats.First = now
	}
	s.available -= float64(requested)
	lo := (q.Variables.First + 9) / 10
	nodes := lo + s.rng.IntN(q.Variables.First-lo+1)
	actual := ShopifyRequested(nodes)
	run := spent{at: now, cost: new(int)}
	*run.cost = requested
	s.runs = append(s.runs, run)
	s.stats.Requested += requested
	s.mu.Unlock()

	if s.cfg.QueryTime > 0 {
		t := time.NewTimer(s.cfg.QueryTime)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return // the requested cost stays taken
		}
	}
	s.mu.Lock()
	s.restore()
	s.available = min(s.available+float64(requested-actual), float64(s.cfg.Bucket))
	*run.cost = actual
	s.stats.Actual += actual
	cost := s.cost(requested, &actual)
	s.mu.Unlock()

	edges := make([]any, nodes)
	for i := range edges {
		edges[i] = map[string]any{"node": map[string]any{"id": fmt.Sprintf("gid://shopify/Product/%d", i+1), "title": "Product"}}
	}
	writeJSON(w, map[string]any{
		"data":       map[string]any{"products": map[string]any{"edges": edges}},
		"extensions": map[string]any{"cost": cost},
	})
}

// restore fills the bucket for the time since it was last restored; s.mu
// is held.
func (s *Shopify) restore() {
	now := s.cfg.Now()
	if d := now.Sub(s.at); d > 0 {
		s.available = min(s.available+d.Seconds()*float64(s.cfg.RestoreRate), float64(s.cfg.Bucket))
		s.at = now
	}
}

// cost is extensions.cost; s.mu is held.
func (s *Shopify) cost(requested int, actual *int) map[string]any {
	return map[string]any{
		"requestedQueryCost": requested,
		"actualQueryCost":    actual,
		"throttleStatus": map[string]any{
			"maximumAvailable":   float64(s.cfg.Bucket),
			"currentlyAvailable": float64(int(s.available)),
			"restoreRate":        float64(s.cfg.RestoreRate),
		},
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
