// Package throttleprom exports the counters of a throttle.Transport (or a
// throttle.Limiter) to Prometheus: a prometheus.Collector that reads their
// Stats at each scrape. It lives in a module of its own, so that the throttle module does
// not depend on the Prometheus client.
//
// Its labels are rule names, their limits and fixed values only, never a
// rate key: their number is bounded by the rules configured in code. A rule
// with lanes (throttle.Rule.Lanes) has series per lane; a rule with tenants
// (throttle.Rule.Tenant) has series for at most 10 tenants at a time, its
// busiest, and tenant="(other)" for all the others together. The
// decisions and waits of a shadow rule (throttle.Rule.Shadow), which are
// what it would have done, carry shadow="true"; leave them out of a sum of
// the requests sent with shadow="false".
//
//	reg.MustRegister(throttleprom.NewCollector(tr))
//
// To register the collectors of several transports in one registry, tell
// them apart with a label of your own:
//
//	prometheus.WrapRegistererWith(prometheus.Labels{"transport": "payments"}, reg).
//		MustRegister(throttleprom.NewCollector(tr))
package throttleprom

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-go/throttle"
)

// Source is what a Collector reads: a *throttle.Transport or a
// *throttle.Limiter.
type Source interface {
	Stats() throttle.Stats
}

// Collector is a prometheus.Collector over the Stats of one Transport or
// Limiter. It is safe for concurrent use.
type Collector struct {
	tr                                                                 Source
	requests, wait, retakes, store, upstream, pauses, tighten, reshape *prometheus.Desc
	refusals, leases, inFlight, widen, ease                            *prometheus.Desc
	used, recentWait                                                   *prometheus.Desc
	laneRequests, laneWait, laneTook, laneBumped                       *prometheus.Desc
	tenantRequests, tenantWait, tenantBumped, tenantShare              *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector of tr's metrics: a *throttle.Transport or
// a *throttle.Limiter, not nil.
func NewCollector(tr Source) *Collector {
	rule := []string{"rule"}
	c := &Collector{
		tr: tr,
		requests: prometheus.NewDesc("throttle_requests_total",
			"Requests by what the transport did with them (one per attempt); outcome is sent, limited, canceled, failed, failed_open or unmatched; shadow is true for a shadow rule's would-be decisions.",
			[]string{"rule", "outcome", "shadow"}, nil),
		wait: prometheus.NewDesc("throttle_wait_seconds",
			"How long the requests sent waited for their slot (a shadow rule's: would have waited).", []string{"rule", "shadow"}, nil),
		used: prometheus.NewDesc("throttle_limit_used_ratio",
			"Units this process sent under the rule in the last window of the limit, over its N (1: the whole limit), all the rule's keys together; sum by rule and limit for the fleet.",
			[]string{"rule", "limit", "shadow"}, nil),
		recentWait: prometheus.NewDesc("throttle_recent_wait_seconds",
			"Mean wait of the requests this process sent under the rule in the last 10 seconds.",
			[]string{"rule", "shadow"}, nil),
		retakes: prometheus.NewDesc("throttle_retakes_total",
			"Slots given back because the process woke too late for them, or because a pause or a stricter pace came after they were placed.", rule, nil),
		store: prometheus.NewDesc("throttle_store_failures_total",
			"Requests that met a failed store, or one marked down, by the policy that decided them: fail_closed (refused), fail_open (sent uncounted) or fail_local (decided in the process).",
			[]string{"rule", "policy"}, nil),
		upstream: prometheus.NewDesc("throttle_upstream_responses_total",
			"Throttled responses from the upstream: 429s, and 503s with Retry-After.", []string{"rule", "status"}, nil),
		refusals: prometheus.NewDesc("throttle_upstream_refusals_total",
			"Other refusals from the upstream, as the rule's Refused describes them: a 403, an error code in a body.", rule, nil),
		pauses: prometheus.NewDesc("throttle_upstream_pauses_total",
			"Pauses recorded for the fleet after a throttled response, an exhausted budget or X-App-Usage at 100%.", rule, nil),
		tighten: prometheus.NewDesc("throttle_upstream_tightenings_total",
			"Limits and budgets learned from the upstream's headers and recorded.", rule, nil),
		reshape: prometheus.NewDesc("throttle_upstream_reshapes_total",
			"Moves to a stricter shape (a pace without a burst) recorded after a 429 that came although the fleet kept its limits.", rule, nil),
		widen: prometheus.NewDesc("throttle_upstream_widenings_total",
			"Widenings of a key's margin recorded after a refusal at a window's edge, renewals included.", rule, nil),
		ease: prometheus.NewDesc("throttle_upstream_easings_total",
			"Probes that moved a key back towards the rule's own shape after a quiet time: a learned pace sped up, or a learned margin narrowed.", rule, nil),
		leases: prometheus.NewDesc("throttle_in_flight_leases",
			"Leases this process holds under Rule.InFlight: requests whose response body is not yet closed.", rule, nil),
		inFlight: prometheus.NewDesc("throttle_in_flight_total",
			"What the cap on requests in flight did: queued (waited for a lease), refused (none within the wait), lost (a lease found expired when renewed) or reclaimed (given back because a response body was not closed in time).",
			[]string{"rule", "event"}, nil),
		laneRequests: prometheus.NewDesc("throttle_lane_requests_total",
			"Requests of each lane of a rule with lanes, sent or limited (refused by a limit).", []string{"rule", "lane", "outcome"}, nil),
		laneWait: prometheus.NewDesc("throttle_lane_wait_seconds",
			"How long the requests of each lane sent waited for their slot.", []string{"rule", "lane"}, nil),
		laneTook: prometheus.NewDesc("throttle_lane_took_total",
			"Requests of the lane sent on the slot of a waiting request of a lower lane.", []string{"rule", "lane"}, nil),
		laneBumped: prometheus.NewDesc("throttle_lane_bumped_total",
			"Times a higher lane took the slot a request of the lane waited for.", []string{"rule", "lane"}, nil),
		tenantRequests: prometheus.NewDesc("throttle_tenant_requests_total",
			"Requests of the busiest tenants of a rule with tenants, sent or limited (refused by a limit), since the tenant was among them; tenant=\"(other)\" for all the others.",
			[]string{"rule", "tenant", "outcome"}, nil),
		tenantWait: prometheus.NewDesc("throttle_tenant_wait_seconds",
			"How long the requests of the busiest tenants sent waited for their slot; tenant=\"(other)\" for all the others.", []string{"rule", "tenant"}, nil),
		tenantBumped: prometheus.NewDesc("throttle_tenant_bumped_total",
			"Times another tenant's earlier turn took the slot a request of the tenant waited for.", []string{"rule", "tenant"}, nil),
		tenantShare: prometheus.NewDesc("throttle_tenant_share_ratio",
			"The tenant's part of the units this process sent under the rule in the last minute (0 to 1).", []string{"rule", "tenant"}, nil),
	}
	return c
}

// Describe sends the descriptions of every metric of c.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.wait, c.retakes, c.store, c.upstream, c.refusals, c.pauses, c.tighten, c.reshape, c.widen, c.ease, c.leases, c.inFlight, c.used, c.recentWait,
		c.laneRequests, c.laneWait, c.laneTook, c.laneBumped, c.tenantRequests, c.tenantWait, c.tenantBumped, c.tenantShare} {
		ch <- d
	}
}

// Collect reads the transport's Stats and sends them as metrics. Every rule
// has every series, zeros included; the requests that no rule matched have
// the rule "" and only their outcome (unmatched) and upstream responses.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.tr == nil {
		return
	}
	s := c.tr.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, r := range s.Rules {
		shadow := strconv.FormatBool(r.Shadow)
		for o, n := range r.Requests {
			if throttle.Outcome(o) != throttle.Unmatched {
				counter(c.requests, n, r.Rule, throttle.Outcome(o).String(), shadow)
			}
		}
		ch <- histogram(c.wait, r.Wait, r.Rule, shadow)
		for i, l := range r.Recent.Limits {
			ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, r.Recent.Used[i], r.Rule, l.String(), shadow)
		}
		ch <- prometheus.MustNewConstMetric(c.recentWait, prometheus.GaugeValue, r.Recent.Wait.Seconds(), r.Rule, shadow)
		counter(c.retakes, r.Retakes, r.Rule)
		counter(c.store, r.Store.Refused, r.Rule, "fail_closed")
		counter(c.store, r.Store.Open, r.Rule, "fail_open")
		counter(c.store, r.Store.Local, r.Rule, "fail_local")
		c.upstreamMetrics(ch, r)
		counter(c.refusals, r.Upstream.Refusals, r.Rule)
		counter(c.pauses, r.Upstream.Pauses, r.Rule)
		counter(c.tighten, r.Upstream.Tightenings, r.Rule)
		counter(c.reshape, r.Upstream.Reshapes, r.Rule)
		counter(c.widen, r.Upstream.Widenings, r.Rule)
		counter(c.ease, r.Upstream.Easings, r.Rule)
		ch <- prometheus.MustNewConstMetric(c.leases, prometheus.GaugeValue, float64(r.InFlight.Held), r.Rule)
		counter(c.inFlight, r.InFlight.Queued, r.Rule, "queued")
		counter(c.inFlight, r.InFlight.Refused, r.Rule, "refused")
		counter(c.inFlight, r.InFlight.Lost, r.Rule, "lost")
		counter(c.inFlight, r.InFlight.Reclaimed, r.Rule, "reclaimed")
		for _, l := range r.Lanes {
			lane := strconv.Itoa(l.Lane)
			counter(c.laneRequests, l.Sent, r.Rule, lane, throttle.Sent.String())
			counter(c.laneRequests, l.Limited, r.Rule, lane, throttle.Limited.String())
			ch <- histogram(c.laneWait, l.Wait, r.Rule, lane)
			counter(c.laneTook, l.Took, r.Rule, lane)
			counter(c.laneBumped, l.Bumped, r.Rule, lane)
		}
		for _, t := range r.Tenants {
			counter(c.tenantRequests, t.Sent, r.Rule, t.Tenant, throttle.Sent.String())
			counter(c.tenantRequests, t.Limited, r.Rule, t.Tenant, throttle.Limited.String())
			ch <- histogram(c.tenantWait, t.Wait, r.Rule, t.Tenant)
			counter(c.tenantBumped, t.Bumped, r.Rule, t.Tenant)
			ch <- prometheus.MustNewConstMetric(c.tenantShare, prometheus.GaugeValue, t.Share, r.Rule, t.Tenant)
		}
	}
	counter(c.requests, s.Unmatched.Requests[throttle.Unmatched], "", throttle.Unmatched.String(), "false")
	c.upstreamMetrics(ch, s.Unmatched)
}

// histogram is h as a Prometheus histogram of d.
func histogram(d *prometheus.Desc, h throttle.WaitHistogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[b.Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets, labels...)
}

func (c *Collector) upstreamMetrics(ch chan<- prometheus.Metric, r throttle.RuleStats) {
	ch <- prometheus.MustNewConstMetric(c.upstream, prometheus.CounterValue, float64(r.Upstream.TooManyRequests), r.Rule, "429")
	ch <- prometheus.MustNewConstMetric(c.upstream, prometheus.CounterValue, float64(r.Upstream.Unavailable), r.Rule, "503")
}
