package throttleprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
	throttleprom "github.com/throttle-go/throttle/metrics/prometheus"
	"github.com/throttle-go/throttle/store"
)

// upstream answers 200, or 429 to a path under /429, or 403 under /403.
var upstream = roundTripperFunc(func(r *http.Request) (*http.Response, error) {
	status := http.StatusOK
	if strings.HasPrefix(r.URL.Path, "/429") {
		status = http.StatusTooManyRequests
	}
	if strings.HasPrefix(r.URL.Path, "/403") {
		status = http.StatusForbidden
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
})

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// downStore returns a store whose every reservation fails, and which keeps
// no feedback.
func downStore() store.Store {
	st := fakestore.New()
	st.Fail(errors.New("connection refused"), 0)
	return st.WithoutFeedback()
}

func newTransport(t *testing.T, st store.Store, opts ...throttle.Option) *throttle.Transport {
	t.Helper()
	if st == nil {
		m, err := store.NewMemory()
		require.NoError(t, err)
		st = m
	}
	tr, err := throttle.New(upstream, st, opts...)
	require.NoError(t, err)
	return tr
}

func get(t *testing.T, tr http.RoundTripper, rawURL string) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

// TestCollector drives two transports, one on a memory store and one on a
// store that is down (failing closed, the default), through sent, waited, limited, failed,
// unmatched and throttled requests, and gathers their collectors from one
// registry, told apart by a label: names, types, help and values as the
// Prometheus text format would show them.
func TestCollector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTransport(t, nil,
			throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(1)}, Margin: throttle.NoMargin}),
			throttle.WithUnmatchedSent(false),
			throttle.WithRule(throttle.Rule{Name: "ff", Host: "ff.example", Limits: []throttle.Limit{throttle.PerHour(1)},
				FailFast: true, IgnoreUpstream: true}),
			throttle.WithRule(throttle.Rule{Name: "gh", Host: "gh.example", Limits: []throttle.Limit{throttle.PerHour(10)},
				Refused: []throttle.Refusal{{Status: http.StatusForbidden}}}))
		require.NoError(t, get(t, tr, "https://gh.example/403")) // sent, a refusal
		require.NoError(t, get(t, tr, "https://api.example/a"))  // sent at once
		require.NoError(t, get(t, tr, "https://api.example/a"))  // sent after 1s and the margin
		require.NoError(t, get(t, tr, "https://ff.example/429")) // sent, answered 429
		require.ErrorIs(t, get(t, tr, "https://ff.example/a"), throttle.ErrLimited)
		require.NoError(t, get(t, tr, "https://other.example/429")) // unmatched, answered 429

		down := newTransport(t, downStore(),
			throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(1)}}))
		require.ErrorIs(t, get(t, down, "https://api.example/a"), throttle.ErrStoreUnavailable)

		reg := prometheus.NewPedanticRegistry() // checks every metric against its description
		for name, tr := range map[string]*throttle.Transport{"main": tr, "down": down} {
			prometheus.WrapRegistererWith(prometheus.Labels{"transport": name}, reg).MustRegister(throttleprom.NewCollector(tr))
		}

		const want = `
# HELP throttle_requests_total Requests by what the transport did with them (one per attempt); outcome is sent, limited, canceled, failed, failed_open or unmatched; shadow is true for a shadow rule's would-be decisions.
# TYPE throttle_requests_total counter
throttle_requests_total{outcome="canceled",rule="api",shadow="false",transport="down"} 0
throttle_requests_total{outcome="canceled",rule="api",shadow="false",transport="main"} 0
throttle_requests_total{outcome="canceled",rule="ff",shadow="false",transport="main"} 0
throttle_requests_total{outcome="canceled",rule="gh",shadow="false",transport="main"} 0
throttle_requests_total{outcome="failed",rule="api",shadow="false",transport="down"} 1
throttle_requests_total{outcome="failed",rule="api",shadow="false",transport="main"} 0
throttle_requests_total{outcome="failed",rule="ff",shadow="false",transport="main"} 0
throttle_requests_total{outcome="failed",rule="gh",shadow="false",transport="main"} 0
throttle_requests_total{outcome="failed_open",rule="api",shadow="false",transport="down"} 0
throttle_requests_total{outcome="failed_open",rule="api",shadow="false",transport="main"} 0
throttle_requests_total{outcome="failed_open",rule="ff",shadow="false",transport="main"} 0
throttle_requests_total{outcome="failed_open",rule="gh",shadow="false",transport="main"} 0
throttle_requests_total{outcome="limited",rule="api",shadow="false",transport="down"} 0
throttle_requests_total{outcome="limited",rule="api",shadow="false",transport="main"} 0
throttle_requests_total{outcome="limited",rule="ff",shadow="false",transport="main"} 1
throttle_requests_total{outcome="limited",rule="gh",shadow="false",transport="main"} 0
throttle_requests_total{outcome="sent",rule="api",shadow="false",transport="down"} 0
throttle_requests_total{outcome="sent",rule="api",shadow="false",transport="main"} 2
throttle_requests_total{outcome="sent",rule="ff",shadow="false",transport="main"} 1
throttle_requests_total{outcome="sent",rule="gh",shadow="false",transport="main"} 1
throttle_requests_total{outcome="unmatched",rule="",shadow="false",transport="down"} 0
throttle_requests_total{outcome="unmatched",rule="",shadow="false",transport="main"} 1
# HELP throttle_store_failures_total Requests that met a failed store, or one marked down, by the policy that decided them: fail_closed (refused), fail_open (sent uncounted) or fail_local (decided in the process).
# TYPE throttle_store_failures_total counter
throttle_store_failures_total{policy="fail_closed",rule="api",transport="down"} 1
throttle_store_failures_total{policy="fail_closed",rule="api",transport="main"} 0
throttle_store_failures_total{policy="fail_closed",rule="ff",transport="main"} 0
throttle_store_failures_total{policy="fail_closed",rule="gh",transport="main"} 0
throttle_store_failures_total{policy="fail_local",rule="api",transport="down"} 0
throttle_store_failures_total{policy="fail_local",rule="api",transport="main"} 0
throttle_store_failures_total{policy="fail_local",rule="ff",transport="main"} 0
throttle_store_failures_total{policy="fail_local",rule="gh",transport="main"} 0
throttle_store_failures_total{policy="fail_open",rule="api",transport="down"} 0
throttle_store_failures_total{policy="fail_open",rule="api",transport="main"} 0
throttle_store_failures_total{policy="fail_open",rule="ff",transport="main"} 0
throttle_store_failures_total{policy="fail_open",rule="gh",transport="main"} 0
# HELP throttle_upstream_responses_total Throttled responses from the upstream: 429s, and 503s with Retry-After.
# TYPE throttle_upstream_responses_total counter
throttle_upstream_responses_total{rule="",status="429",transport="down"} 0
throttle_upstream_responses_total{rule="",status="429",transport="main"} 1
throttle_upstream_responses_total{rule="",status="503",transport="down"} 0
throttle_upstream_responses_total{rule="",status="503",transport="main"} 0
throttle_upstream_responses_total{rule="api",status="429",transport="down"} 0
throttle_upstream_responses_total{rule="api",status="429",transport="main"} 0
throttle_upstream_responses_total{rule="api",status="503",transport="down"} 0
throttle_upstream_responses_total{rule="api",status="503",transport="main"} 0
throttle_upstream_responses_total{rule="ff",status="429",transport="main"} 1
throttle_upstream_responses_total{rule="ff",status="503",transport="main"} 0
throttle_upstream_responses_total{rule="gh",status="429",transport="main"} 0
throttle_upstream_responses_total{rule="gh",status="503",transport="main"} 0
# HELP throttle_upstream_refusals_total Other refusals from the upstream, as the rule's Refused describes them: a 403, an error code in a body.
# TYPE throttle_upstream_refusals_total counter
throttle_upstream_refusals_total{rule="api",transport="down"} 0
throttle_upstream_refusals_total{rule="api",transport="main"} 0
throttle_upstream_refusals_total{rule="ff",transport="main"} 0
throttle_upstream_refusals_total{rule="gh",transport="main"} 1
`
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
			"throttle_requests_total", "throttle_store_failures_total", "throttle_upstream_responses_total", "throttle_upstream_refusals_total"))

		// Every family, with its type.
		families, err := reg.Gather()
		require.NoError(t, err)
		types := map[string]dto.MetricType{}
		for _, f := range families {
			types[f.GetName()] = f.GetType()
		}
		assert.Equal(t, map[string]dto.MetricType{
			"throttle_requests_total":             dto.MetricType_COUNTER,
			"throttle_wait_seconds":               dto.MetricType_HISTOGRAM,
			"throttle_retakes_total":              dto.MetricType_COUNTER,
			"throttle_store_failures_total":       dto.MetricType_COUNTER,
			"throttle_upstream_responses_total":   dto.MetricType_COUNTER,
			"throttle_upstream_refusals_total":    dto.MetricType_COUNTER,
			"throttle_upstream_pauses_total":      dto.MetricType_COUNTER,
			"throttle_upstream_tightenings_total": dto.MetricType_COUNTER,
			"throttle_upstream_reshapes_total":    dto.MetricType_COUNTER,
			"throttle_upstream_widenings_total":   dto.MetricType_COUNTER,
			"throttle_upstream_easings_total":     dto.MetricType_COUNTER,
			"throttle_in_flight_leases":           dto.MetricType_GAUGE,
			"throttle_in_flight_total":            dto.MetricType_COUNTER,
			"throttle_limit_used_ratio":           dto.MetricType_GAUGE,
			"throttle_recent_wait_seconds":        dto.MetricType_GAUGE,
		}, types)

		// The waits of rule api (no margin, so no allowance either): one of
		// none, one of 1s, in le 1.024.
		h := histogram(t, families, "api", "main")
		assert.Equal(t, uint64(2), h.GetSampleCount())
		assert.InDelta(t, time.Second.Seconds(), h.GetSampleSum(), 1e-9)
		cum := map[float64]uint64{}
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		assert.Equal(t, len(tr.Stats().Rules[0].Wait.Bounds), len(h.GetBucket()))
		assert.Equal(t, uint64(1), cum[0])
		assert.Equal(t, uint64(1), cum[0.512])
		assert.Equal(t, uint64(2), cum[1.024])
		assert.Equal(t, uint64(2), cum[65.536])

		// The naming conventions, as promlint checks them.
		problems, err := testutil.GatherAndLint(reg)
		require.NoError(t, err)
		assert.Empty(t, problems)
	})
}

// histogram returns the wait histogram of rule on transport.
func histogram(t *testing.T, families []*dto.MetricFamily, rule, transport string) *dto.Histogram {
	t.Helper()
	for _, f := range families {
		if f.GetName() != "throttle_wait_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["rule"] == rule && labels["transport"] == transport {
				return m.GetHistogram()
			}
		}
	}
	t.Fatalf("no throttle_wait_seconds for rule %q on %q", rule, transport)
	return nil
}

// TestNilTransport: a collector of nil collects nothing rather than panic.
func TestNilTransport(t *testing.T) {
	assert.Equal(t, 0, testutil.CollectAndCount(throttleprom.NewCollector(nil)))
}

// TestCollectorInFlightAndLimiter: a rule capped at one request in flight,
// whose response body is still open, holds one lease and refuses the next
// request; and a Limiter is a source like a Transport.
func TestCollectorInFlightAndLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := store.NewMemory()
		require.NoError(t, err)
		withBody := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
		})
		tr, err := throttle.New(withBody, m, throttle.WithRule(throttle.Rule{Name: "capped", Host: "api.example",
			Limits: []throttle.Limit{throttle.PerSecond(100)}, FailFast: true, InFlight: 1}))
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodGet, "https://api.example/a", nil)
		require.NoError(t, err)
		open, err := tr.RoundTrip(req) // its body stays open: the lease is held
		require.NoError(t, err)
		require.ErrorIs(t, get(t, tr, "https://api.example/b"), throttle.ErrLimited)

		lim, err := throttle.NewLimiter(m, throttle.Rule{Name: "jobs", Limits: []throttle.Limit{throttle.PerHour(1)}, FailFast: true})
		require.NoError(t, err)
		for range 2 {
			_, err := lim.Allow(context.Background(), "queue", 1)
			require.NoError(t, err)
		}

		reg := prometheus.NewPedanticRegistry()
		prometheus.WrapRegistererWith(prometheus.Labels{"source": "transport"}, reg).MustRegister(throttleprom.NewCollector(tr))
		prometheus.WrapRegistererWith(prometheus.Labels{"source": "limiter"}, reg).MustRegister(throttleprom.NewCollector(lim))
		const want = `
# HELP throttle_in_flight_leases Leases this process holds under Rule.InFlight: requests whose response body is not yet closed.
# TYPE throttle_in_flight_leases gauge
throttle_in_flight_leases{rule="capped",source="transport"} 1
throttle_in_flight_leases{rule="jobs",source="limiter"} 0
# HELP throttle_in_flight_total What the cap on requests in flight did: queued (waited for a lease), refused (none within the wait), lost (a lease found expired when renewed) or reclaimed (given back because a response body was not closed in time).
# TYPE throttle_in_flight_total counter
throttle_in_flight_total{event="lost",rule="capped",source="transport"} 0
throttle_in_flight_total{event="lost",rule="jobs",source="limiter"} 0
throttle_in_flight_total{event="queued",rule="capped",source="transport"} 0
throttle_in_flight_total{event="queued",rule="jobs",source="limiter"} 0
throttle_in_flight_total{event="reclaimed",rule="capped",source="transport"} 0
throttle_in_flight_total{event="reclaimed",rule="jobs",source="limiter"} 0
throttle_in_flight_total{event="refused",rule="capped",source="transport"} 1
throttle_in_flight_total{event="refused",rule="jobs",source="limiter"} 0
`
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "throttle_in_flight_leases", "throttle_in_flight_total"))
		// The limiter's refused Allow counts as the Transport's refusal does.
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP throttle_requests_total Requests by what the transport did with them (one per attempt); outcome is sent, limited, canceled, failed, failed_open or unmatched; shadow is true for a shadow rule's would-be decisions.
# TYPE throttle_requests_total counter
throttle_requests_total{outcome="canceled",rule="capped",shadow="false",source="transport"} 0
throttle_requests_total{outcome="failed",rule="capped",shadow="false",source="transport"} 0
throttle_requests_total{outcome="failed_open",rule="capped",shadow="false",source="transport"} 0
throttle_requests_total{outcome="limited",rule="capped",shadow="false",source="transport"} 1
throttle_requests_total{outcome="sent",rule="capped",shadow="false",source="transport"} 1
throttle_requests_total{outcome="unmatched",rule="",shadow="false",source="transport"} 0
throttle_requests_total{outcome="canceled",rule="jobs",shadow="false",source="limiter"} 0
throttle_requests_total{outcome="failed",rule="jobs",shadow="false",source="limiter"} 0
throttle_requests_total{outcome="failed_open",rule="jobs",shadow="false",source="limiter"} 0
throttle_requests_total{outcome="limited",rule="jobs",shadow="false",source="limiter"} 1
throttle_requests_total{outcome="sent",rule="jobs",shadow="false",source="limiter"} 1
throttle_requests_total{outcome="unmatched",rule="",shadow="false",source="limiter"} 0
`), "throttle_requests_total"))
		require.NoError(t, open.Body.Close())
		assert.Zero(t, tr.Stats().Rules[0].InFlight.Held, "the lease goes back with the body")
	})
}

// TestCollectorShadowAndRecent: a shadow rule's series say shadow="true",
// and every rule reports the share of each limit it used and its recent
// mean wait as gauges.
func TestCollectorShadowAndRecent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTransport(t, nil,
			throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(4)}, NoDefaultPace: true, Margin: throttle.NoMargin}),
			throttle.WithRule(throttle.Rule{Name: "try", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(2)}, FailFast: true, Shadow: true}))
		for range 3 {
			require.NoError(t, get(t, tr, "https://api.example/a"))
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(throttleprom.NewCollector(tr))
		const want = `
# HELP throttle_limit_used_ratio Units this process sent under the rule in the last window of the limit, over its N (1: the whole limit), all the rule's keys together; sum by rule and limit for the fleet.
# TYPE throttle_limit_used_ratio gauge
throttle_limit_used_ratio{limit="2/1s",rule="try",shadow="true"} 1
throttle_limit_used_ratio{limit="4/1s",rule="api",shadow="false"} 0.75
# HELP throttle_recent_wait_seconds Mean wait of the requests this process sent under the rule in the last 10 seconds.
# TYPE throttle_recent_wait_seconds gauge
throttle_recent_wait_seconds{rule="api",shadow="false"} 0
throttle_recent_wait_seconds{rule="try",shadow="true"} 0
`
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "throttle_limit_used_ratio", "throttle_recent_wait_seconds"))
		families, err := reg.Gather()
		require.NoError(t, err)
		got := map[string]float64{}
		for _, f := range families {
			if f.GetName() != "throttle_requests_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				got[labels["rule"]+" "+labels["outcome"]+" "+labels["shadow"]] = m.GetCounter().GetValue()
			}
		}
		assert.Equal(t, 3.0, got["api sent false"])
		assert.Equal(t, 2.0, got["try sent true"], "would have sent two")
		assert.Equal(t, 1.0, got["try limited true"], "and refused the third")
	})
}

// TestCollectorLanesAndTenants: a rule with two lanes has series per lane;
// a rule with 1,003 tenants, three of them heavy, has series for at most 11
// values of tenant: the three heavy ones among them, and "(other)".
func TestCollectorLanesAndTenants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTransport(t, nil,
			throttle.WithRule(throttle.Rule{Name: "lanes", Host: "lanes.example", Limits: []throttle.Limit{throttle.PerSecond(10)},
				NoDefaultPace: true, Margin: throttle.NoMargin, Lanes: 2,
				Lane: func(r *http.Request) int {
					if r.Header.Get("X-Lane") == "1" {
						return 1
					}
					return 0
				}}),
			throttle.WithRule(throttle.Rule{Name: "saas", Host: "saas.example", Limits: []throttle.Limit{throttle.PerSecond(1 << 20)},
				NoDefaultPace: true, Margin: throttle.NoMargin,
				Tenant: func(r *http.Request) (string, error) { return r.Header.Get("X-Customer"), nil }}))
		send := func(rawURL, header, value string) {
			req, err := http.NewRequest(http.MethodGet, rawURL, nil)
			require.NoError(t, err)
			req.Header.Set(header, value)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
		}
		// Twenty backfill requests fill this second and the next; an
		// interactive one at 50ms takes the first slot of the next.
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { send("https://lanes.example/a", "X-Lane", "0") })
		}
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		send("https://lanes.example/a", "X-Lane", "1")
		wg.Wait()
		heavy := []string{"heavy-a", "heavy-b", "heavy-c"}
		for i := range 1000 {
			send("https://saas.example/a", "X-Customer", fmt.Sprintf("light-%d", i))
			if i%10 == 9 {
				for _, h := range heavy {
					send("https://saas.example/a", "X-Customer", h)
				}
			}
		}

		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(throttleprom.NewCollector(tr))
		const want = `
# HELP throttle_lane_bumped_total Times a higher lane took the slot a request of the lane waited for.
# TYPE throttle_lane_bumped_total counter
throttle_lane_bumped_total{lane="0",rule="lanes"} 1
throttle_lane_bumped_total{lane="1",rule="lanes"} 0
# HELP throttle_lane_requests_total Requests of each lane of a rule with lanes, sent or limited (refused by a limit).
# TYPE throttle_lane_requests_total counter
throttle_lane_requests_total{lane="0",outcome="limited",rule="lanes"} 0
throttle_lane_requests_total{lane="0",outcome="sent",rule="lanes"} 20
throttle_lane_requests_total{lane="1",outcome="limited",rule="lanes"} 0
throttle_lane_requests_total{lane="1",outcome="sent",rule="lanes"} 1
# HELP throttle_lane_took_total Requests of the lane sent on the slot of a waiting request of a lower lane.
# TYPE throttle_lane_took_total counter
throttle_lane_took_total{lane="0",rule="lanes"} 0
throttle_lane_took_total{lane="1",rule="lanes"} 1
`
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
			"throttle_lane_requests_total", "throttle_lane_took_total", "throttle_lane_bumped_total"))

		families, err := reg.Gather()
		require.NoError(t, err)
		tenants := map[string]map[string]bool{} // family → tenant label values
		var laneWait map[string]float64         // lane → sum of the waits
		for _, f := range families {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if v, ok := labels["tenant"]; ok {
					if tenants[f.GetName()] == nil {
						tenants[f.GetName()] = map[string]bool{}
					}
					tenants[f.GetName()][v] = true
				}
				if f.GetName() == "throttle_lane_wait_seconds" {
					if laneWait == nil {
						laneWait = map[string]float64{}
					}
					laneWait[labels["lane"]] = m.GetHistogram().GetSampleSum()
				}
				if f.GetName() == "throttle_tenant_share_ratio" && strings.HasPrefix(labels["tenant"], "heavy-") {
					assert.InDelta(t, 96.0/1300, m.GetGauge().GetValue(), 1e-9)
				}
			}
		}
		assert.Equal(t, map[string]float64{"1": 0.95, "0": laneWait["0"]}, laneWait)
		assert.Len(t, tenants, 4)
		for name, values := range tenants {
			assert.Len(t, values, 11, name)
			for _, v := range append(heavy, "(other)") {
				assert.True(t, values[v], "%s: %s", name, v)
			}
		}

		problems, err := testutil.GatherAndLint(reg)
		require.NoError(t, err)
		assert.Empty(t, problems)
	})
}

// fixed is a Source whose Stats are given.
type fixed throttle.Stats

func (f fixed) Stats() throttle.Stats { return throttle.Stats(f) }

// TestCollectorWideningsAndEasings: the learned margin's widenings and the
// probes that eased a key back are exported per rule.
func TestCollectorWideningsAndEasings(t *testing.T) {
	r := throttle.RuleStats{Rule: "api"}
	r.Upstream.Widenings, r.Upstream.Easings = 3, 2
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(throttleprom.NewCollector(fixed{Rules: []throttle.RuleStats{r}}))
	const want = `
# HELP throttle_upstream_easings_total Probes that moved a key back towards the rule's own shape after a quiet time: a learned pace sped up, or a learned margin narrowed.
# TYPE throttle_upstream_easings_total counter
throttle_upstream_easings_total{rule="api"} 2
# HELP throttle_upstream_widenings_total Widenings of a key's margin recorded after a refusal at a window's edge, renewals included.
# TYPE throttle_upstream_widenings_total counter
throttle_upstream_widenings_total{rule="api"} 3
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"throttle_upstream_widenings_total", "throttle_upstream_easings_total"))
}
