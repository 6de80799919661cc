//go:build integration

package examples_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/profiles"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

// TestFleetProfiles runs a profile family against the fake of its API
// (throttletest) over real HTTP: 3 groups of 4 workers, each group on a
// Transport and a Redis client of its own (a process each, but for the
// binary), one real redis-server, limits scaled down so that a run lasts a
// few seconds. It counts the fake's refusals after the first window and
// the share of the binding limit the fleet used after it. The families:
// GitHub (an hourly window, points, in flight, 403s), Discord (a route's
// bucket), Meta (usage as percentages), Google Maps (a 200 that refuses),
// Salesforce (a 403 with an error code), AWS (a 400 with an error code, a
// token bucket) and Shopify (a leaky bucket).
//
//	FLEET_PROFILE_REPS=10 go test -tags integration -run 'TestFleetProfiles' -v ./examples/
//
// FLEET_PROFILE_REPS=n runs every family n times (cold: a fresh key each
// run); without it the test is skipped. FLEET_PROFILE_TRACE=1 adds each
// run's timeline.
func TestFleetProfiles(t *testing.T) {
	// A measurement, not a check: it asserts nothing of the figures it
	// prints (docs/profiles.md states them, misses included), so it runs
	// only when asked for.
	v := os.Getenv("FLEET_PROFILE_REPS")
	if v == "" {
		t.Skip("a measurement of about 40s per run: set FLEET_PROFILE_REPS")
	}
	reps, err := strconv.Atoi(v)
	require.NoError(t, err, "FLEET_PROFILE_REPS")
	srv, _ := startRedis(t)
	families := []struct {
		name string
		// make returns the rule, the fake, what a worker sends, and the
		// binding limit (n per w).
		make     func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration)
		duration time.Duration
	}{
		{"GitHub: hourly window (3s), points, in flight, 403s", func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration) {
			// 300 per 3s and 54 points per 50ms: GitHub's proportions.
			up, err := throttletest.NewGitHub(throttletest.Config{N: 300, Window: 3 * time.Second})
			require.NoError(t, err)
			r := profiles.GitHub()
			r.Limits = []throttle.Limit{throttle.Per(300, 3*time.Second), throttle.Per(54, 50*time.Millisecond).Of("points")}
			return r, up, http.MethodGet, "https://api.github.com/repos/a/b", [2]string{"Authorization", "Bearer t"}, 300, 3 * time.Second
		}, 10500 * time.Millisecond},
		{"GitHub with a margin of 20ms", func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration) {
			// The same, with the margin the README advises for a path
			// whose jitter is a few ms (a loaded machine's loopback):
			// with the default 5 ms, the 50 ms points window met 403s.
			up, err := throttletest.NewGitHub(throttletest.Config{N: 300, Window: 3 * time.Second})
			require.NoError(t, err)
			r := profiles.GitHub()
			r.Limits = []throttle.Limit{throttle.Per(300, 3*time.Second), throttle.Per(54, 50*time.Millisecond).Of("points")}
			r.Margin = 20 * time.Millisecond
			return r, up, http.MethodGet, "https://api.github.com/repos/a/b", [2]string{"Authorization", "Bearer t"}, 300, 3 * time.Second
		}, 10500 * time.Millisecond},
		{"Discord: a route's bucket (10 per 3s), the global limit", func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration) {
			up, err := throttletest.NewDiscord(throttletest.Config{N: 10, Window: 3 * time.Second})
			require.NoError(t, err)
			return profiles.Discord(), up, http.MethodPost, "https://discord.com/api/v10/channels/1/messages", [2]string{"Authorization", "Bot t"}, 10, 3 * time.Second
		}, 10500 * time.Millisecond},
		{"Meta: usage percentages (100 per rolling 2s)", func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration) {
			up, err := throttletest.NewMeta(throttletest.Config{N: 100, Window: 2 * time.Second})
			require.NoError(t, err)
			r := profiles.Meta(100)
			r.Limits = []throttle.Limit{throttle.Per(100, 2*time.Second)}
			return r, up, http.MethodGet, "https://graph.facebook.com/v19.0/me?access_token=app", [2]string{}, 100, 2 * time.Second
		}, 7 * time.Second},
		{"Google Maps: a 200 that says OVER_QUERY_LIMIT (100 per aligned 2s)", func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration) {
			up, err := throttletest.NewGoogleMaps(throttletest.Config{N: 100, Window: 2 * time.Second})
			require.NoError(t, err)
			r := profiles.GoogleMaps(100, 0)
			r.Limits = []throttle.Limit{throttle.Per(100, 2*time.Second)}
			return r, up, http.MethodGet, "https://maps.googleapis.com/maps/api/geocode/json?key=k&address=x", [2]string{}, 100, 2 * time.Second
		}, 7 * time.Second},
		{"Salesforce: a 403 REQUEST_LIMIT_EXCEEDED (100 per rolling 2s)", func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration) {
			// An org's rolling 24 hours, scaled to 2 seconds.
			up, err := throttletest.NewSalesforce(throttletest.Config{N: 100, Window: 2 * time.Second})
			require.NoError(t, err)
			r := profiles.Salesforce(100)
			r.Limits = []throttle.Limit{throttle.Per(100, 2*time.Second)}
			return r, up, http.MethodGet, "https://acme.my.salesforce.com/services/data/v62.0/query?q=x", [2]string{"Authorization", "Bearer t"}, 100, 2 * time.Second
		}, 7 * time.Second},
		{"AWS: a 400 with an error code, a token bucket (100, refilled 50/s)", func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration) {
			// EC2's DescribeHosts bucket of 100, refilled 100 per 2s
			// rather than 20 per second.
			up, err := throttletest.NewAWS(throttletest.Config{N: 100, Window: 2 * time.Second})
			require.NoError(t, err)
			return profiles.AWS(100, 50), up, http.MethodGet, "https://ec2.us-east-1.amazonaws.com/?Action=DescribeHosts&Version=2016-11-15",
				[2]string{"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/us-east-1/ec2/aws4_request, SignedHeaders=host;x-amz-date, Signature=5d67"}, 100, 2 * time.Second
		}, 7 * time.Second},
		{"Shopify: a leaky bucket (40, leaking 20/s)", func() (throttle.Rule, *throttletest.Upstream, string, string, [2]string, int, time.Duration) {
			// The standard plan's bucket of 40, leaking 40 per 2s rather
			// than 2 per second.
			up, err := throttletest.NewShopify(throttletest.Config{N: 40, Window: 2 * time.Second})
			require.NoError(t, err)
			r := profiles.Shopify(profiles.ShopifyStandard)
			r.Limits = []throttle.Limit{throttle.Paced(40, 2*time.Second, 39)}
			return r, up, http.MethodGet, "https://shop.myshopify.com/admin/api/2026-01/orders.json", [2]string{"X-Shopify-Access-Token", "shpat"}, 40, 2 * time.Second
		}, 7 * time.Second},
	}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			var lates []int
			var shares []float64
			for rep := range reps {
				rule, up, method, target, hdr, n, w := f.make()
				// A fresh key each run: the store is cold.
				rule.Name = rule.Name + "-" + strconv.Itoa(rep) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				late, share := runProfileFleet(t, srv.Addr, rule, up, method, target, hdr, n, w, f.duration)
				lates, shares = append(lates, late), append(shares, share)
			}
			slices.Sort(lates)
			slices.Sort(shares)
			t.Logf("%d runs: refusals after the first window %v (median %d); share of the binding limit %.3f (median %.3f)",
				reps, lates, lates[len(lates)/2], shares, shares[len(shares)/2])
		})
	}
}

// runProfileFleet runs one cold fleet and returns the fake's refusals after
// the first window of n per w, and the steady share of n per w the fake
// accepted after the first window (steadyShare: w over the mean time from
// an accepted request to the n-th after it). FLEET_PROFILE_TRACE=1 logs
// each run's timeline (traceFleet).
func runProfileFleet(t *testing.T, redisAddr string, rule throttle.Rule, up *throttletest.Upstream, method, target string, hdr [2]string, n int, w, d time.Duration) (late int, share float64) {
	t.Helper()
	api := httptest.NewServer(up)
	defer api.Close()
	apiURL, err := url.Parse(api.URL)
	require.NoError(t, err)
	wire := &http.Transport{MaxIdleConnsPerHost: 16}
	defer wire.CloseIdleConnections()
	// base sends every request to the fake, whatever its host, and
	// keeps what each answer said for the trace.
	var (
		mu      sync.Mutex
		heard   []heardAnswer
		limited int           // requests the throttle refused itself
		longest time.Duration // the longest RetryAfter of those
		failed  []string      // other errors, the first few
	)
	base := roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = apiURL.Scheme, apiURL.Host
		sent := time.Now()
		resp, err := wire.RoundTrip(r)
		if err == nil {
			mu.Lock()
			heard = append(heard, heardAnswer{sent, time.Now(), resp.StatusCode, resp.Header.Clone()})
			mu.Unlock()
		}
		return resp, err
	})
	// Each key of a run is new: the rule's name is the key's prefix.
	rule.Key = prefixed(rule.Name, rule.Key)
	end := time.Now().Add(d)
	var (
		wg  sync.WaitGroup
		trs []*throttle.Transport
	)
	for range 3 {
		st, closeStore, err := store.NewRedisURL("redis://" + redisAddr)
		require.NoError(t, err)
		defer func() { _ = closeStore.Close() }()
		tr, err := throttle.New(base, st, throttle.WithRule(rule))
		require.NoError(t, err)
		trs = append(trs, tr)
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(end) {
					ctx, cancel := context.WithDeadline(context.Background(), end)
					req, err := http.NewRequestWithContext(ctx, method, target, nil)
					if err != nil {
						t.Error(err)
						cancel()
						return
					}
					if hdr[0] != "" {
						req.Header.Set(hdr[0], hdr[1])
					}
					resp, err := tr.RoundTrip(req)
					var le *throttle.LimitError
					switch {
					case errors.As(err, &le):
						mu.Lock()
						limited++
						longest = max(longest, le.RetryAfter)
						mu.Unlock()
						select {
						case <-time.After(max(le.RetryAfter, time.Millisecond)):
						case <-ctx.Done():
						}
					case err == nil:
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					case ctx.Err() == nil:
						mu.Lock()
						if len(failed) < 3 {
							failed = append(failed, err.Error())
						}
						mu.Unlock()
					}
					cancel()
				}
			})
		}
	}
	wg.Wait()
	total := up.Stats().Total
	edge := total.FirstAccepted.Add(w)
	for _, at := range total.RejectedAt {
		if !at.Before(edge) {
			late++
		}
	}
	// The share after the first window, which a cold fleet sends as a
	// burst: counted from arrivals before it, an arrival's n-th successor
	// measures the change from the burst to the steady sends (a fleet
	// spread by Meta's usage sent 100 per 2s in each window and scored
	// 85% so).
	after := total.Arrivals[sort.Search(len(total.Arrivals), func(i int) bool { return !total.Arrivals[i].Before(edge) }):]
	share = steadyShare(n, w, after)
	whole := steadyShare(n, w, total.Arrivals)
	var us throttle.RuleStats
	for _, tr := range trs {
		s := tr.Stats().Total()
		us.Upstream.Refusals += s.Upstream.Refusals + s.Upstream.TooManyRequests
		us.Upstream.Pauses += s.Upstream.Pauses
		us.Upstream.Reshapes += s.Upstream.Reshapes
		us.Upstream.Tightenings += s.Upstream.Tightenings
	}
	t.Logf("%s: %d accepted, %d refused (%d after the first window), %.3f of %d per %s after the first window (%.3f from the first request); heard %d refusals, %d pauses, %d reshapes, %d tightenings",
		rule.Name, total.Accepted, total.Rejected, late, share, n, w, whole,
		us.Upstream.Refusals, us.Upstream.Pauses, us.Upstream.Reshapes, us.Upstream.Tightenings)
	if os.Getenv("FLEET_PROFILE_TRACE") != "" {
		t.Logf("  the throttle refused %d requests itself (the longest RetryAfter %s); errors %q", limited, longest, failed)
		for _, l := range rule.Limits {
			if l.Paced {
				continue // a bucket: no window to fill
			}
			t.Logf("  %d arrivals within %s at the closest (the limit: %s)", l.N+1, minGap(l.N, total.Arrivals), l.Per)
		}
		traceFleet(t, total, heard, w)
	}
	return late, share
}

// heardAnswer is one answer of the fake as the wire saw it.
type heardAnswer struct {
	sent, received time.Time
	status         int
	header         http.Header
}

// traceFleet logs a run's timeline in tenths of the window w from the
// first accepted arrival: the fake's accepted and refused arrivals, the
// answers the fleet received, their statuses beyond 200, and what their
// rate-limit headers said (the lowest remaining, the highest usage, any
// Retry-After).
func traceFleet(t *testing.T, total throttletest.KeyStats, heard []heardAnswer, w time.Duration) {
	t.Helper()
	step := w / 10
	start := total.FirstAccepted
	slot := func(at time.Time) int { return int(math.Floor(float64(at.Sub(start)) / float64(step))) }
	type row struct {
		accepted, refused, answers int
		statuses                   map[int]int
		remaining                  int
		usage                      [2]int // lowest, highest; -1: none
		retry                      []string
	}
	rows := map[int]*row{}
	get := func(i int) *row {
		r := rows[i]
		if r == nil {
			r = &row{statuses: map[int]int{}, remaining: -1, usage: [2]int{-1, -1}}
			rows[i] = r
		}
		return r
	}
	for _, at := range total.Arrivals {
		get(slot(at)).accepted++
	}
	for _, at := range total.RejectedAt {
		get(slot(at)).refused++
	}
	slices.SortFunc(heard, func(a, b heardAnswer) int { return a.received.Compare(b.received) })
	for _, h := range heard {
		r := get(slot(h.received))
		r.answers++
		if h.status != http.StatusOK {
			r.statuses[h.status]++
		}
		if v, err := strconv.Atoi(h.header.Get("X-Ratelimit-Remaining")); err == nil && (r.remaining < 0 || v < r.remaining) {
			r.remaining = v
		}
		if u, ok := usagePercent(h.header.Get("X-App-Usage")); ok {
			if r.usage[0] < 0 || u < r.usage[0] {
				r.usage[0] = u
			}
			r.usage[1] = max(r.usage[1], u)
		}
		if v := h.header.Get("Retry-After"); v != "" && !slices.Contains(r.retry, v) {
			r.retry = append(r.retry, v)
		}
	}
	// How long the answers took (the wire's jitter, both ways), and how
	// close the fake's accepted arrivals came to the tightest windows.
	var rtt []time.Duration
	for _, h := range heard {
		rtt = append(rtt, h.received.Sub(h.sent))
	}
	slices.Sort(rtt)
	if len(rtt) > 0 {
		q := func(p float64) time.Duration { return rtt[int(p*float64(len(rtt)-1))] }
		t.Logf("  answers in %s (median), %s (p99), %s (max)", q(0.5), q(0.99), rtt[len(rtt)-1])
	}
	keys := slices.Sorted(maps.Keys(rows))
	for _, i := range keys {
		r := rows[i]
		t.Logf("  %6s: accepted %3d refused %2d | answers %3d %v remaining>=%d usage %v retry-after %v",
			time.Duration(i)*step, r.accepted, r.refused, r.answers, r.statuses, r.remaining, r.usage, r.retry)
	}
}

// usagePercent returns X-App-Usage's call_count.
func usagePercent(v string) (int, bool) {
	_, rest, ok := strings.Cut(v, `"call_count":`)
	if !ok {
		return 0, false
	}
	n, _, _ := strings.Cut(rest, ",")
	u, err := strconv.Atoi(n)
	return u, err == nil
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// prefixed keys as key does, behind prefix.
func prefixed(prefix string, key throttle.KeyFunc) throttle.KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		return prefix + ":" + k, err
	}
}
