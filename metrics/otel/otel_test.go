package throttleotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
	throttleotel "github.com/throttle-go/throttle/metrics/otel"
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

// collected is what a ManualReader collected: per instrument, its unit and
// its points by attributes ("k=v,k=v").
type collected map[string]instrument

type instrument struct {
	unit   string
	points map[string]float64
}

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	c := collected{}
	enc := attribute.DefaultEncoder()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			ins := instrument{unit: m.Unit, points: map[string]float64{}}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				require.True(t, d.IsMonotonic, m.Name)
				require.Equal(t, metricdata.CumulativeTemporality, d.Temporality, m.Name)
				for _, p := range d.DataPoints {
					ins.points[p.Attributes.Encoded(enc)] = float64(p.Value)
				}
			case metricdata.Sum[float64]:
				require.True(t, d.IsMonotonic, m.Name)
				for _, p := range d.DataPoints {
					ins.points[p.Attributes.Encoded(enc)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					ins.points[p.Attributes.Encoded(enc)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					ins.points[p.Attributes.Encoded(enc)] = p.Value
				}
			default:
				t.Fatalf("%s: unexpected %T", m.Name, m.Data)
			}
			c[m.Name] = ins
		}
	}
	return c
}

// TestRegister drives a transport on a memory store through sent, waited,
// limited, unmatched and throttled requests, and one on a store that is down
// (failing closed, the default), told apart by an attribute, and collects their instruments
// with the SDK's ManualReader:
// names, units, kinds and values; after Unregister, nothing.
func TestRegister(t *testing.T) {
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
		require.NoError(t, get(t, tr, "https://ff.example/429"))
		require.ErrorIs(t, get(t, tr, "https://ff.example/a"), throttle.ErrLimited)
		require.NoError(t, get(t, tr, "https://other.example/429")) // unmatched
		down := newTransport(t, downStore(),
			throttle.WithRule(throttle.Rule{Name: "down", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(1)}}))
		require.ErrorIs(t, get(t, down, "https://api.example/a"), throttle.ErrStoreUnavailable)

		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		meter := mp.Meter("github.com/throttle-go/throttle")
		reg, err := throttleotel.Register(meter, tr)
		require.NoError(t, err)
		regDown, err := throttleotel.Register(meter, down, attribute.String("transport", "down"))
		require.NoError(t, err)

		got := collect(t, reader)
		units := map[string]string{}
		for name, ins := range got {
			units[name] = ins.unit
		}
		assert.Equal(t, map[string]string{
			"throttle.requests":             "{request}",
			"throttle.wait.time":            "s",
			"throttle.wait.requests":        "{request}",
			"throttle.retakes":              "{retake}",
			"throttle.store.failures":       "{request}",
			"throttle.upstream.responses":   "{response}",
			"throttle.upstream.refusals":    "{response}",
			"throttle.upstream.pauses":      "{pause}",
			"throttle.upstream.tightenings": "{tightening}",
			"throttle.upstream.reshapes":    "{reshape}",
			"throttle.upstream.widenings":   "{widening}",
			"throttle.upstream.easings":     "{easing}",
			"throttle.in_flight.events":     "{request}",
			"throttle.in_flight.leases":     "{lease}",
			"throttle.limit.used":           "1",
			"throttle.wait.recent":          "s",
		}, units)

		req := got["throttle.requests"].points
		assert.Equal(t, 2.0, req["throttle.outcome=sent,throttle.rule=api"])
		assert.Equal(t, 0.0, req["throttle.outcome=limited,throttle.rule=api"])
		assert.Equal(t, 1.0, req["throttle.outcome=sent,throttle.rule=ff"])
		assert.Equal(t, 1.0, req["throttle.outcome=limited,throttle.rule=ff"])
		assert.Equal(t, 1.0, req["throttle.outcome=failed,throttle.rule=down,transport=down"])
		assert.Equal(t, 0.0, req["throttle.outcome=unmatched,throttle.rule=,transport=down"])
		assert.Equal(t, 1.0, req["throttle.outcome=unmatched,throttle.rule="])
		assert.Len(t, req, 4*5+2, "5 outcomes per rule, and the unmatched requests of each transport")

		assert.InDelta(t, time.Second.Seconds(), got["throttle.wait.time"].points["throttle.rule=api"], 1e-9)
		waits := got["throttle.wait.requests"].points
		le := func(b float64) string {
			set := attribute.NewSet(throttleotel.RuleKey.String("api"), throttleotel.WaitBoundKey.Float64(b))
			return set.Encoded(attribute.DefaultEncoder())
		}
		assert.Equal(t, 1.0, waits[le(0)])
		assert.Equal(t, 1.0, waits[le(0.512)])
		assert.Equal(t, 2.0, waits[le(1.024)])
		assert.Equal(t, 2.0, waits[le(math.Inf(1))])

		st := got["throttle.store.failures"].points
		assert.Equal(t, 1.0, st["throttle.rule=down,throttle.store.policy=fail_closed,transport=down"])
		assert.Equal(t, 0.0, st["throttle.rule=down,throttle.store.policy=fail_open,transport=down"])
		assert.Equal(t, 0.0, st["throttle.rule=api,throttle.store.policy=fail_closed"])

		up := got["throttle.upstream.responses"].points
		assert.Equal(t, 1.0, up["http.response.status_code=429,throttle.rule=ff"])
		assert.Equal(t, 1.0, up["http.response.status_code=429,throttle.rule="])
		assert.Equal(t, 0.0, up["http.response.status_code=503,throttle.rule=ff"])
		assert.Equal(t, 0.0, got["throttle.upstream.pauses"].points["throttle.rule=ff"])
		assert.Equal(t, 0.0, up["http.response.status_code=429,throttle.rule=gh"], "a 403 is no 429")
		assert.Equal(t, map[string]float64{"throttle.rule=api": 0, "throttle.rule=ff": 0, "throttle.rule=gh": 1, "throttle.rule=down,transport=down": 0},
			got["throttle.upstream.refusals"].points)

		require.NoError(t, reg.Unregister())
		require.NoError(t, regDown.Unregister())
		for name, ins := range collect(t, reader) {
			assert.Empty(t, ins.points, name)
		}
	})
}

// TestRegisterInFlightAndLimiter: a rule capped at one request in flight,
// whose response body is still open, holds one lease and refuses the next
// request; and a Limiter is a source like a Transport.
func TestRegisterInFlightAndLimiter(t *testing.T) {
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

		reader := sdkmetric.NewManualReader()
		meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("github.com/throttle-go/throttle")
		_, err = throttleotel.Register(meter, tr)
		require.NoError(t, err)
		_, err = throttleotel.Register(meter, lim, attribute.String("source", "limiter"))
		require.NoError(t, err)
		got := collect(t, reader)
		assert.Equal(t, 1.0, got["throttle.in_flight.leases"].points["throttle.rule=capped"])
		assert.Equal(t, 0.0, got["throttle.in_flight.leases"].points["source=limiter,throttle.rule=jobs"])
		ev := got["throttle.in_flight.events"].points
		assert.Equal(t, 1.0, ev["throttle.in_flight.event=refused,throttle.rule=capped"])
		assert.Equal(t, 0.0, ev["throttle.in_flight.event=queued,throttle.rule=capped"])
		assert.Equal(t, 0.0, ev["throttle.in_flight.event=lost,throttle.rule=capped"])
		reqs := got["throttle.requests"].points
		assert.Equal(t, 1.0, reqs["source=limiter,throttle.outcome=limited,throttle.rule=jobs"])
		assert.Equal(t, 1.0, reqs["source=limiter,throttle.outcome=sent,throttle.rule=jobs"])

		require.NoError(t, open.Body.Close())
		assert.Equal(t, 0.0, collect(t, reader)["throttle.in_flight.leases"].points["throttle.rule=capped"], "the lease goes back with the body")
	})
}

// TestRegisterNil: a nil meter or transport is an error, not a panic.
func TestRegisterNil(t *testing.T) {
	mp := sdkmetric.NewMeterProvider()
	_, err := throttleotel.Register(mp.Meter("x"), nil)
	assert.Error(t, err)
	_, err = throttleotel.Register(nil, newTransport(t, nil,
		throttle.WithRule(throttle.Rule{Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(1)}})))
	assert.Error(t, err)
}

// TestRegisterShadowAndRecent: every point of a shadow rule carries
// throttle.shadow=true, and every rule has the share of each limit it used
// and its recent mean wait.
func TestRegisterShadowAndRecent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTransport(t, nil,
			throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(4)}, NoDefaultPace: true, Margin: throttle.NoMargin}),
			throttle.WithRule(throttle.Rule{Name: "try", Host: "api.example", Limits: []throttle.Limit{throttle.PerSecond(2)}, FailFast: true, Shadow: true}))
		for range 3 {
			require.NoError(t, get(t, tr, "https://api.example/a"))
		}
		reader := sdkmetric.NewManualReader()
		_, err := throttleotel.Register(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("throttle"), tr)
		require.NoError(t, err)
		got := collect(t, reader)
		reqs := got["throttle.requests"].points
		assert.Equal(t, 3.0, reqs["throttle.outcome=sent,throttle.rule=api"])
		assert.Equal(t, 2.0, reqs["throttle.outcome=sent,throttle.rule=try,throttle.shadow=true"])
		assert.Equal(t, 1.0, reqs["throttle.outcome=limited,throttle.rule=try,throttle.shadow=true"])
		assert.Equal(t, map[string]float64{
			"throttle.limit=4/1s,throttle.rule=api":                      0.75,
			"throttle.limit=2/1s,throttle.rule=try,throttle.shadow=true": 1,
		}, got["throttle.limit.used"].points)
		assert.Equal(t, map[string]float64{
			"throttle.rule=api":                      0,
			"throttle.rule=try,throttle.shadow=true": 0,
		}, got["throttle.wait.recent"].points)
	})
}

// TestRegisterLanesAndTenants: a rule with two lanes has points per lane;
// a rule with 1,003 tenants, three of them heavy, has points for at most 11
// values of throttle.tenant: the three heavy ones among them, and "(other)".
func TestRegisterLanesAndTenants(t *testing.T) {
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

		reader := sdkmetric.NewManualReader()
		_, err := throttleotel.Register(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("throttle"), tr)
		require.NoError(t, err)
		got := collect(t, reader)
		assert.Equal(t, map[string]float64{
			"throttle.lane=0,throttle.outcome=sent,throttle.rule=lanes":    20,
			"throttle.lane=0,throttle.outcome=limited,throttle.rule=lanes": 0,
			"throttle.lane=1,throttle.outcome=sent,throttle.rule=lanes":    1,
			"throttle.lane=1,throttle.outcome=limited,throttle.rule=lanes": 0,
		}, got["throttle.lane.requests"].points)
		assert.Equal(t, map[string]float64{"throttle.lane=0,throttle.rule=lanes": 0, "throttle.lane=1,throttle.rule=lanes": 1},
			got["throttle.lane.took"].points)
		assert.Equal(t, map[string]float64{"throttle.lane=0,throttle.rule=lanes": 1, "throttle.lane=1,throttle.rule=lanes": 0},
			got["throttle.lane.bumped"].points)
		assert.InDelta(t, 0.95, got["throttle.lane.wait.time"].points["throttle.lane=1,throttle.rule=lanes"], 1e-9)
		assert.Equal(t, 1.0, got["throttle.lane.wait.requests"].points["throttle.lane=1,throttle.rule=lanes,throttle.wait.le=1.024"])
		assert.Equal(t, 0.0, got["throttle.lane.wait.requests"].points["throttle.lane=1,throttle.rule=lanes,throttle.wait.le=0.512"])
		assert.Equal(t, "1", got["throttle.tenant.share"].unit)

		for _, name := range []string{"throttle.tenant.requests", "throttle.tenant.wait.time", "throttle.tenant.wait.requests",
			"throttle.tenant.bumped", "throttle.tenant.share"} {
			tenants := map[string]bool{}
			for attrs := range got[name].points {
				for _, kv := range strings.Split(attrs, ",") {
					if v, ok := strings.CutPrefix(kv, "throttle.tenant="); ok {
						tenants[v] = true
					}
				}
			}
			assert.Len(t, tenants, 11, name)
			for _, v := range append(heavy, "(other)") {
				assert.True(t, tenants[v], "%s: %s", name, v)
			}
		}
		for _, h := range heavy {
			assert.InDelta(t, 96.0/1300, got["throttle.tenant.share"].points["throttle.rule=saas,throttle.tenant="+h], 1e-9)
			assert.Equal(t, 96.0, got["throttle.tenant.requests"].points["throttle.outcome=sent,throttle.rule=saas,throttle.tenant="+h])
		}
	})
}

// fixed is a Source whose Stats are given.
type fixed throttle.Stats

func (f fixed) Stats() throttle.Stats { return throttle.Stats(f) }

// TestRegisterWideningsAndEasings: the learned margin's widenings and the
// probes that eased a key back are observed per rule.
func TestRegisterWideningsAndEasings(t *testing.T) {
	r := throttle.RuleStats{Rule: "api"}
	r.Upstream.Widenings, r.Upstream.Easings = 3, 2
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	_, err := throttleotel.Register(mp.Meter("test"), fixed{Rules: []throttle.RuleStats{r}})
	require.NoError(t, err)
	got := collect(t, reader)
	assert.Equal(t, map[string]float64{"throttle.rule=api": 3}, got["throttle.upstream.widenings"].points)
	assert.Equal(t, map[string]float64{"throttle.rule=api": 2}, got["throttle.upstream.easings"].points)
}
