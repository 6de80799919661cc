// Package throttleotel exports the counters of a throttle.Transport (or a
// throttle.Limiter) as OpenTelemetry metrics: asynchronous instruments on a
// metric.Meter, observed from their Stats at each collection. It lives in a module of its own,
// so that the throttle module does not depend on OpenTelemetry.
//
// Its attributes are rule names, their limits and fixed values only, never
// a rate key: their number is bounded by the rules configured in code. A
// rule with lanes (throttle.Rule.Lanes) has points per lane; a rule with
// tenants (throttle.Rule.Tenant) has points for at most 10 tenants at a
// time, its busiest, and throttle.tenant="(other)" for all the others. A
// shadow rule's points carry throttle.shadow=true: leave them out of a sum
// of the requests sent.
//
//	reg, err := throttleotel.Register(provider.Meter("throttle"), tr)
//	...
//	defer reg.Unregister()
//
// To register several transports on one meter, tell them apart with an
// attribute of your own:
//
//	throttleotel.Register(meter, tr, attribute.String("transport", "payments"))
//
// OpenTelemetry has no asynchronous histogram, so the distribution of the
// waits is given as cumulative bucket counts (throttle.wait.requests, by
// throttle.wait.le) beside their total (throttle.wait.time), as a Prometheus
// histogram is.
package throttleotel

import (
	"context"
	"errors"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/throttle-go/throttle"
)

// Attribute keys of the instruments.
const (
	// RuleKey is the rule's name; "" for the requests no rule matched.
	RuleKey = attribute.Key("throttle.rule")
	// OutcomeKey is what the transport did with a request: sent, limited,
	// canceled, failed, failed_open or unmatched (throttle.Outcome).
	OutcomeKey = attribute.Key("throttle.outcome")
	// PolicyKey is the store failure policy that decided a request:
	// fail_closed, fail_open or fail_local.
	PolicyKey = attribute.Key("throttle.store.policy")
	// WaitBoundKey is the upper bound, in seconds, of a wait bucket
	// (+Inf for the last).
	WaitBoundKey = attribute.Key("throttle.wait.le")
	// StatusKey is the HTTP status code of an upstream's response (the
	// semantic conventions' name).
	StatusKey = attribute.Key("http.response.status_code")
	// EventKey is what a cap on requests in flight did: queued, refused or
	// lost.
	EventKey = attribute.Key("throttle.in_flight.event")
	// ShadowKey is true on every point of a shadow rule
	// (throttle.Rule.Shadow), whose counts are what it would have done;
	// absent for the others.
	ShadowKey = attribute.Key("throttle.shadow")
	// LimitKey is one of a rule's limits, as throttle.Limit.String
	// writes it: "100/1s".
	LimitKey = attribute.Key("throttle.limit")
	// LaneKey is a lane of a rule with lanes (throttle.LaneStats.Lane).
	LaneKey = attribute.Key("throttle.lane")
	// TenantKey is one of the busiest tenants of a rule with tenants, as
	// throttle.TenantStats.Tenant names it: "(other)" for all the others.
	TenantKey = attribute.Key("throttle.tenant")
)

// Source is what Register observes: a *throttle.Transport or a
// *throttle.Limiter.
type Source interface {
	Stats() throttle.Stats
}

// Register creates the instruments on m and a callback that observes tr's
// Stats at each collection, with attrs added to every point:
//
//	throttle.requests             {request}     throttle.rule, throttle.outcome
//	throttle.wait.time            s             throttle.rule
//	throttle.wait.requests        {request}     throttle.rule, throttle.wait.le
//	throttle.retakes              {retake}      throttle.rule
//	throttle.store.failures       {request}     throttle.rule, throttle.store.policy
//	throttle.upstream.responses   {response}    throttle.rule, http.response.status_code
//	throttle.upstream.refusals    {response}    throttle.rule
//	throttle.upstream.pauses      {pause}       throttle.rule
//	throttle.upstream.tightenings {tightening}  throttle.rule
//	throttle.upstream.reshapes    {reshape}     throttle.rule
//	throttle.upstream.widenings   {widening}    throttle.rule
//	throttle.upstream.easings     {easing}      throttle.rule
//	throttle.in_flight.leases     {lease}       throttle.rule
//	throttle.in_flight.events     {request}     throttle.rule, throttle.in_flight.event
//	throttle.limit.used           1             throttle.rule, throttle.limit
//	throttle.wait.recent          s             throttle.rule
//	throttle.lane.requests        {request}     throttle.rule, throttle.lane, throttle.outcome
//	throttle.lane.wait.time       s             throttle.rule, throttle.lane
//	throttle.lane.wait.requests   {request}     throttle.rule, throttle.lane, throttle.wait.le
//	throttle.lane.took            {request}     throttle.rule, throttle.lane
//	throttle.lane.bumped          {bump}        throttle.rule, throttle.lane
//	throttle.tenant.requests      {request}     throttle.rule, throttle.tenant, throttle.outcome
//	throttle.tenant.wait.time     s             throttle.rule, throttle.tenant
//	throttle.tenant.wait.requests {request}     throttle.rule, throttle.tenant, throttle.wait.le
//	throttle.tenant.bumped        {bump}        throttle.rule, throttle.tenant
//	throttle.tenant.share         1             throttle.rule, throttle.tenant
//
// throttle.in_flight.leases, the leases held now under Rule.InFlight, is a
// gauge, and so are throttle.limit.used and throttle.wait.recent
// (RuleStats.Recent: the share of each limit this process used in its last
// window, and the mean wait of its sends in the last 10 seconds), and
// throttle.tenant.share (the tenant's part of the units this process sent
// under the rule in the last minute); the others are cumulative counters.
// The lanes' and tenants' throttle.outcome is sent or limited. Unregister the Registration to
// stop.
func Register(m metric.Meter, tr Source, attrs ...attribute.KeyValue) (metric.Registration, error) {
	if m == nil || tr == nil {
		return nil, errors.New("throttleotel: nil meter or source")
	}
	ins := instruments{extra: append([]attribute.KeyValue(nil), attrs...)}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	ins.requests = counter("throttle.requests", "{request}",
		"Requests by what the transport did with them, one per attempt.")
	floatCounter := func(name, unit, desc string) metric.Float64ObservableCounter {
		c, err := m.Float64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	ins.waitTime = floatCounter("throttle.wait.time", "s", "Total time the requests sent waited for their slot.")
	ins.waits = counter("throttle.wait.requests", "{request}",
		"Requests sent that waited at most throttle.wait.le seconds for their slot (cumulative buckets).")
	ins.retakes = counter("throttle.retakes", "{retake}",
		"Slots given back because the process woke too late for them, or because a pause or a stricter pace came after they were placed.")
	ins.store = counter("throttle.store.failures", "{request}",
		"Requests that met a failed store, or one marked down, by the policy that decided them.")
	ins.upstream = counter("throttle.upstream.responses", "{response}",
		"Throttled responses from the upstream: 429s, and 503s with Retry-After.")
	ins.refusals = counter("throttle.upstream.refusals", "{response}",
		"Other refusals from the upstream, as the rule's Refused describes them: a 403, an error code in a body.")
	ins.pauses = counter("throttle.upstream.pauses", "{pause}",
		"Pauses recorded for the fleet after a throttled response, an exhausted budget or X-App-Usage at 100%.")
	ins.tighten = counter("throttle.upstream.tightenings", "{tightening}",
		"Limits and budgets learned from the upstream's headers and recorded.")
	ins.reshape = counter("throttle.upstream.reshapes", "{reshape}",
		"Moves to a stricter shape (a pace without a burst) recorded after a 429 that came although the fleet kept its limits.")
	ins.widen = counter("throttle.upstream.widenings", "{widening}",
		"Widenings of a key's margin recorded after a refusal at a window's edge, renewals included.")
	ins.ease = counter("throttle.upstream.easings", "{easing}",
		"Probes that moved a key back towards the rule's own shape after a quiet time: a learned pace sped up, or a learned margin narrowed.")
	ins.inFlight = counter("throttle.in_flight.events", "{request}",
		"What the cap on requests in flight did: queued (waited for a lease), refused (none within the wait), lost (a lease found expired when renewed) or reclaimed (given back because a response body was not closed in time).")
	leases, err := m.Int64ObservableGauge("throttle.in_flight.leases", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases this process holds under Rule.InFlight: requests whose response body is not yet closed."))
	errs = append(errs, err)
	ins.leases = leases
	used, err := m.Float64ObservableGauge("throttle.limit.used", metric.WithUnit("1"),
		metric.WithDescription("Units this process sent under the rule in the last window of the limit, over its N (1: the whole limit), all the rule's keys together."))
	errs = append(errs, err)
	ins.used = used
	recent, err := m.Float64ObservableGauge("throttle.wait.recent", metric.WithUnit("s"),
		metric.WithDescription("Mean wait of the requests this process sent under the rule in the last 10 seconds."))
	errs = append(errs, err)
	ins.recentWait = recent
	ins.laneRequests = counter("throttle.lane.requests", "{request}",
		"Requests of each lane of a rule with lanes, sent or limited (refused by a limit).")
	ins.laneWaitTime = floatCounter("throttle.lane.wait.time", "s", "Total time the requests of the lane sent waited for their slot.")
	ins.laneWaits = counter("throttle.lane.wait.requests", "{request}",
		"Requests of the lane sent that waited at most throttle.wait.le seconds for their slot (cumulative buckets).")
	ins.laneTook = counter("throttle.lane.took", "{request}",
		"Requests of the lane sent on the slot of a waiting request of a lower lane.")
	ins.laneBumped = counter("throttle.lane.bumped", "{bump}",
		"Times a higher lane took the slot a request of the lane waited for.")
	ins.tenantRequests = counter("throttle.tenant.requests", "{request}",
		"Requests of the busiest tenants of a rule with tenants, sent or limited (refused by a limit), since the tenant was among them; (other) for all the others.")
	ins.tenantWaitTime = floatCounter("throttle.tenant.wait.time", "s", "Total time the requests of the tenant sent waited for their slot.")
	ins.tenantWaits = counter("throttle.tenant.wait.requests", "{request}",
		"Requests of the tenant sent that waited at most throttle.wait.le seconds for their slot (cumulative buckets).")
	ins.tenantBumped = counter("throttle.tenant.bumped", "{bump}",
		"Times another tenant's earlier turn took the slot a request of the tenant waited for.")
	share, err := m.Float64ObservableGauge("throttle.tenant.share", metric.WithUnit("1"),
		metric.WithDescription("The tenant's part of the units this process sent under the rule in the last minute (0 to 1)."))
	errs = append(errs, err)
	ins.tenantShare = share
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		ins.observe(o, tr.Stats())
		return nil
	}, ins.requests, ins.waitTime, ins.waits, ins.retakes, ins.store, ins.upstream, ins.refusals, ins.pauses, ins.tighten, ins.reshape, ins.widen, ins.ease, ins.inFlight, ins.leases, ins.used, ins.recentWait,
		ins.laneRequests, ins.laneWaitTime, ins.laneWaits, ins.laneTook, ins.laneBumped,
		ins.tenantRequests, ins.tenantWaitTime, ins.tenantWaits, ins.tenantBumped, ins.tenantShare)
}

type instruments struct {
	requests, waits, retakes, store, upstream, pauses, tighten, reshape metric.Int64ObservableCounter
	refusals, inFlight, widen, ease                                     metric.Int64ObservableCounter
	leases                                                              metric.Int64ObservableGauge
	waitTime                                                            metric.Float64ObservableCounter
	used, recentWait                                                    metric.Float64ObservableGauge
	laneRequests, laneWaits, laneTook, laneBumped                       metric.Int64ObservableCounter
	tenantRequests, tenantWaits, tenantBumped                           metric.Int64ObservableCounter
	laneWaitTime, tenantWaitTime                                        metric.Float64ObservableCounter
	tenantShare                                                         metric.Float64ObservableGauge
	extra                                                               []attribute.KeyValue
}

// with returns the attributes kv and the caller's.
func (ins *instruments) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append(kv, ins.extra...)...)
}

// observe reports s. Every rule has every series, zeros included; the
// requests that no rule matched have the rule "" and only their outcome
// (unmatched) and upstream responses.
func (ins *instruments) observe(o metric.Observer, s throttle.Stats) {
	for _, r := range s.Rules {
		rule := RuleKey.String(r.Rule)
		with := ins.with
		if r.Shadow {
			with = func(kv ...attribute.KeyValue) metric.MeasurementOption {
				return ins.with(append(kv, ShadowKey.Bool(true))...)
			}
		}
		for i, n := range r.Requests {
			if oc := throttle.Outcome(i); oc != throttle.Unmatched {
				o.ObserveInt64(ins.requests, clamp(n), with(rule, OutcomeKey.String(oc.String())))
			}
		}
		observeWaits(o, ins.waitTime, ins.waits, r.Wait, with, rule)
		o.ObserveInt64(ins.retakes, clamp(r.Retakes), with(rule))
		for _, p := range []struct {
			name string
			n    uint64
		}{{"fail_closed", r.Store.Refused}, {"fail_open", r.Store.Open}, {"fail_local", r.Store.Local}} {
			o.ObserveInt64(ins.store, clamp(p.n), with(rule, PolicyKey.String(p.name)))
		}
		ins.observeUpstream(o, with, rule, r)
		o.ObserveInt64(ins.refusals, clamp(r.Upstream.Refusals), with(rule))
		o.ObserveInt64(ins.pauses, clamp(r.Upstream.Pauses), with(rule))
		o.ObserveInt64(ins.tighten, clamp(r.Upstream.Tightenings), with(rule))
		o.ObserveInt64(ins.reshape, clamp(r.Upstream.Reshapes), with(rule))
		o.ObserveInt64(ins.widen, clamp(r.Upstream.Widenings), with(rule))
		o.ObserveInt64(ins.ease, clamp(r.Upstream.Easings), with(rule))
		o.ObserveInt64(ins.leases, r.InFlight.Held, with(rule))
		o.ObserveInt64(ins.inFlight, clamp(r.InFlight.Queued), with(rule, EventKey.String("queued")))
		o.ObserveInt64(ins.inFlight, clamp(r.InFlight.Refused), with(rule, EventKey.String("refused")))
		o.ObserveInt64(ins.inFlight, clamp(r.InFlight.Lost), with(rule, EventKey.String("lost")))
		o.ObserveInt64(ins.inFlight, clamp(r.InFlight.Reclaimed), with(rule, EventKey.String("reclaimed")))
		for i, l := range r.Recent.Limits {
			o.ObserveFloat64(ins.used, r.Recent.Used[i], with(rule, LimitKey.String(l.String())))
		}
		o.ObserveFloat64(ins.recentWait, r.Recent.Wait.Seconds(), with(rule))
		for _, l := range r.Lanes {
			lane := LaneKey.Int(l.Lane)
			o.ObserveInt64(ins.laneRequests, clamp(l.Sent), with(rule, lane, OutcomeKey.String(throttle.Sent.String())))
			o.ObserveInt64(ins.laneRequests, clamp(l.Limited), with(rule, lane, OutcomeKey.String(throttle.Limited.String())))
			observeWaits(o, ins.laneWaitTime, ins.laneWaits, l.Wait, with, rule, lane)
			o.ObserveInt64(ins.laneTook, clamp(l.Took), with(rule, lane))
			o.ObserveInt64(ins.laneBumped, clamp(l.Bumped), with(rule, lane))
		}
		for _, t := range r.Tenants {
			tenant := TenantKey.String(t.Tenant)
			o.ObserveInt64(ins.tenantRequests, clamp(t.Sent), with(rule, tenant, OutcomeKey.String(throttle.Sent.String())))
			o.ObserveInt64(ins.tenantRequests, clamp(t.Limited), with(rule, tenant, OutcomeKey.String(throttle.Limited.String())))
			observeWaits(o, ins.tenantWaitTime, ins.tenantWaits, t.Wait, with, rule, tenant)
			o.ObserveInt64(ins.tenantBumped, clamp(t.Bumped), with(rule, tenant))
			o.ObserveFloat64(ins.tenantShare, t.Share, with(rule, tenant))
		}
	}
	rule := RuleKey.String("")
	o.ObserveInt64(ins.requests, clamp(s.Unmatched.Requests[throttle.Unmatched]),
		ins.with(rule, OutcomeKey.String(throttle.Unmatched.String())))
	ins.observeUpstream(o, ins.with, rule, s.Unmatched)
}

func (ins *instruments) observeUpstream(o metric.Observer, with func(...attribute.KeyValue) metric.MeasurementOption, rule attribute.KeyValue, r throttle.RuleStats) {
	o.ObserveInt64(ins.upstream, clamp(r.Upstream.TooManyRequests), with(rule, StatusKey.Int(429)))
	o.ObserveInt64(ins.upstream, clamp(r.Upstream.Unavailable), with(rule, StatusKey.Int(503)))
}

// observeWaits reports h: its total in sum, its cumulative buckets in
// buckets, each with the attributes kv and its bound.
func observeWaits(o metric.Observer, sum metric.Float64ObservableCounter, buckets metric.Int64ObservableCounter, h throttle.WaitHistogram,
	with func(...attribute.KeyValue) metric.MeasurementOption, kv ...attribute.KeyValue) {
	o.ObserveFloat64(sum, h.Sum.Seconds(), with(kv...))
	var cum uint64
	for i := range len(h.Bounds) + 1 { // the last bucket's bound is +Inf
		cum += h.Counts[i]
		bound := math.Inf(1)
		if i < len(h.Bounds) {
			bound = h.Bounds[i].Seconds()
		}
		o.ObserveInt64(buckets, clamp(cum), with(append(kv[:len(kv):len(kv)], WaitBoundKey.Float64(bound))...))
	}
}

// clamp converts a count to the int64 of an instrument.
func clamp(n uint64) int64 { return int64(min(n, math.MaxInt64)) }
