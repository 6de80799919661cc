// Package throttleotel exports the counters of a throttle.Transport (or a
// throttle.Limiter) as OpenTelemetry metrics: asynchronous instruments on a
// metric.Meter, observed from their Stats at each collection. It lives in a module of its own,
// so that the throttle module does not depend on OpenTelemetry.
//
// Its attributes are rule names, their limits and fixed values only, never
// a rate key: their number is bounded by the rules configured in code. A
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
//	throttle.in_flight.leases     {lease}       throttle.rule
//	throttle.in_flight.events     {request}     throttle.rule, throttle.in_flight.event
//	throttle.limit.used           1             throttle.rule, throttle.limit
//	throttle.wait.recent          s             throttle.rule
//
// throttle.in_flight.leases, the leases held now under Rule.InFlight, is a
// gauge, and so are throttle.limit.used and throttle.wait.recent
// (RuleStats.Recent: the share of each limit this process used in its last
// window, and the mean wait of its sends in the last 10 seconds); the
// others are cumulative counters. Unregister the Registration to
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
	waitTime, err := m.Float64ObservableCounter("throttle.wait.time", metric.WithUnit("s"),
		metric.WithDescription("Total time the requests sent waited for their slot."))
	errs = append(errs, err)
	ins.waitTime = waitTime
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
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		ins.observe(o, tr.Stats())
		return nil
	}, ins.requests, ins.waitTime, ins.waits, ins.retakes, ins.store, ins.upstream, ins.refusals, ins.pauses, ins.tighten, ins.reshape, ins.inFlight, ins.leases, ins.used, ins.recentWait)
}

type instruments struct {
	requests, waits, retakes, store, upstream, pauses, tighten, reshape metric.Int64ObservableCounter
	refusals, inFlight                                                  metric.Int64ObservableCounter
	leases                                                              metric.Int64ObservableGauge
	waitTime                                                            metric.Float64ObservableCounter
	used, recentWait                                                    metric.Float64ObservableGauge
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
		o.ObserveFloat64(ins.waitTime, r.Wait.Sum.Seconds(), with(rule))
		var cum uint64
		for i := range len(r.Wait.Bounds) + 1 { // the last bucket's bound is +Inf
			cum += r.Wait.Counts[i]
			bound := math.Inf(1)
			if i < len(r.Wait.Bounds) {
				bound = r.Wait.Bounds[i].Seconds()
			}
			o.ObserveInt64(ins.waits, clamp(cum), with(rule, WaitBoundKey.Float64(bound)))
		}
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
		o.ObserveInt64(ins.leases, r.InFlight.Held, with(rule))
		o.ObserveInt64(ins.inFlight, clamp(r.InFlight.Queued), with(rule, EventKey.String("queued")))
		o.ObserveInt64(ins.inFlight, clamp(r.InFlight.Refused), with(rule, EventKey.String("refused")))
		o.ObserveInt64(ins.inFlight, clamp(r.InFlight.Lost), with(rule, EventKey.String("lost")))
		o.ObserveInt64(ins.inFlight, clamp(r.InFlight.Reclaimed), with(rule, EventKey.String("reclaimed")))
		for i, l := range r.Recent.Limits {
			o.ObserveFloat64(ins.used, r.Recent.Used[i], with(rule, LimitKey.String(l.String())))
		}
		o.ObserveFloat64(ins.recentWait, r.Recent.Wait.Seconds(), with(rule))
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

// clamp converts a count to the int64 of an instrument.
func clamp(n uint64) int64 { return int64(min(n, math.MaxInt64)) }
