package throttle

import (
	"errors"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/throttle-go/throttle/internal/engine"
)

// This file is the transport's counters: per rule name, atomic, no
// allocation on the request path, and no lock but the short one of the
// recent windows (saturation.go); Stats reads them. The adapters in
// metrics/prometheus and metrics/otel (modules of their own) export them.

// numOutcomes is the number of Outcome values.
const numOutcomes = len(outcomeNames)

// waitBounds are the upper bounds of the wait histogram's buckets: 0 (no
// wait), then powers of 2 from 1ms to 65.536s, past a rule's default MaxWait. A wait
// falls in the first bucket whose bound is at least the wait.
var waitBounds = func() (b [18]time.Duration) {
	for i := 1; i < len(b); i++ {
		b[i] = time.Millisecond << (i - 1)
	}
	return b
}()

// numWaitBuckets is the number of buckets of a WaitHistogram: one per bound
// and one for the waits above the last.
const numWaitBuckets = len(waitBounds) + 1

// waitBucket returns the index of the bucket of a wait of d: 0 for none, i
// for d in (2^(i-2)ms, 2^(i-1)ms], the last for a wait above every bound.
func waitBucket(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	ms := uint64((d + time.Millisecond - 1) / time.Millisecond) // rounded up
	return min(bits.Len64(ms-1)+1, numWaitBuckets-1)
}

// Stats is a snapshot of a Transport's or a Limiter's counters since it was
// created. Each
// counter is read atomically, but not all at the same instant.
type Stats struct {
	// Rules has one entry per rule name, in the order of the options, the
	// default rule last (rules of the same name share their counts).
	Rules []RuleStats
	// Unmatched counts the requests no rule matched (Outcome Unmatched),
	// and the throttled responses they got. Its Rule is empty.
	Unmatched RuleStats
}

// Total returns the sum of the counts of every enforced rule and of
// Unmatched: shadow rules (Rule.Shadow) are left out, since their requests
// are the enforced rules' too. Its Rule is empty.
func (s Stats) Total() RuleStats {
	t := s.Unmatched
	t.Wait.Bounds = slices.Clone(t.Wait.Bounds)
	for _, r := range s.Rules {
		if !r.Shadow {
			t.add(r)
		}
	}
	t.Rule = ""
	return t
}

// RuleStats counts what happened to the requests of one rule.
type RuleStats struct {
	Rule string
	// Shadow is set for a shadow rule (Rule.Shadow): its counts are what
	// it would have done, not what was done to the requests.
	Shadow bool
	// Requests counts the decisions by outcome, one per attempt (a
	// retry is counted again): Requests[Limited] is the number refused
	// by a limit.
	Requests [numOutcomes]uint64
	// Wait is the distribution of the waits (Decision.Delay) of the
	// requests sent (Outcome Sent).
	Wait WaitHistogram
	// Retakes counts the slots given back because the process woke too
	// late for them, or because a pause or a stricter pace came after they
	// were placed (Decision.Retaken, summed).
	Retakes uint64
	// Store counts the requests that met a failed store, or one marked
	// down, by what the store failure policy did with them.
	Store struct {
		// Refused counts the requests refused with a *StoreError (the
		// default policy: fail closed).
		Refused uint64
		// Open counts the requests sent uncounted (WithFailOpen).
		Open uint64
		// Local counts the requests the in-process limiter decided
		// (WithFailLocal), whatever it decided: Decision.Local set.
		Local uint64
	}
	// Upstream counts what the upstream said.
	Upstream struct {
		// TooManyRequests counts the 429 responses received, despite the
		// throttle: the number to keep at zero (a 429 the rule's
		// NotRefused describes is not counted).
		TooManyRequests uint64
		// Unavailable counts the 503 responses with Retry-After.
		Unavailable uint64
		// Refusals counts the other refusals, those the rule's Refused
		// describes (a 403, an error code in a body): to keep at zero too.
		Refusals uint64
		// Pauses counts the pauses recorded (one per throttled response,
		// plus budgets exhausted and X-App-Usage at 100%).
		Pauses uint64
		// Tightenings counts the learned limits and budgets recorded.
		Tightenings uint64
		// Reshapes counts the moves to a stricter shape recorded (a paced
		// limit without a burst, after a 429 although the throttle kept
		// the rule's limits), renewals included.
		Reshapes uint64
		// Widenings counts the widenings of a key's margin recorded after
		// a refusal at a window's edge (Feedback.Margin), renewals
		// included.
		Widenings uint64
		// Easings counts the probes that moved a key back towards the
		// rule's own shape after a quiet time: a learned pace sped up or
		// a learned margin narrowed (Feedback.Eased).
		Easings uint64
	}
	// InFlight counts what the rule's cap on requests in flight
	// (Rule.InFlight) did in this process.
	InFlight struct {
		// Held is the number of leases the process holds now: requests
		// reserved or in flight whose response body is not yet closed.
		Held int64
		// Queued counts the requests that waited in the queue for a
		// lease; Refused, the requests refused for want of one
		// (Decision.InFlight).
		Queued, Refused uint64
		// Lost counts the leases found expired when renewed: the process
		// stalled longer than LeaseFor/2, and its request was no longer
		// counted in the cap.
		Lost uint64
		// Reclaimed counts the leases given back because a response body
		// was not closed within ten LeaseFor (a warning to the logger
		// each).
		Reclaimed uint64
	}
	// Recent says how close the rule runs to its limits, from this
	// process's own decisions (no store call): see docs/operations.md,
	// "Saturation". Stats.Total leaves it empty.
	Recent struct {
		// Limits are the rule's, in its order; Used[i] is the units this
		// process sent under the rule in the last window of Limits[i]
		// (its Per, ending now), divided by its N: 1 is the whole limit.
		// It counts every key of the rule together, so it is the share
		// of the key's limit for a rule with one key (Fixed, ByHost of
		// one host), and a bound above any one key's share otherwise.
		// A shadow rule counts what it would have sent.
		Limits []Limit
		Used   []float64
		// Wait is the mean wait of the requests this process sent under
		// the rule in the last 10 seconds; zero when none waited.
		Wait time.Duration
	}
	// Lanes has the counts of each lane of a rule with lanes (Rule.Lanes),
	// lane 0 first; nil for a rule without. Stats.Total leaves it nil.
	Lanes []LaneStats
	// Tenants has the counts of the tenants of a rule with tenants
	// (Rule.Tenant): a row for each of the at most 10 that sent the most
	// units lately, the most first, then one row (Other set) for all the
	// others together, however many; nil for a rule without. A tenant
	// that falls out of the ten takes its counts with it. See
	// docs/operations.md, "Lanes and tenants". Stats.Total leaves it nil.
	Tenants []TenantStats
}

// WaitHistogram is a distribution of waits.
type WaitHistogram struct {
	// Bounds are the upper bounds of the buckets: 0 (no wait), then 1ms,
	// 2ms, 4ms, ... 65.536s.
	Bounds []time.Duration
	// Counts[i] counts the waits of at most Bounds[i] (and above the
	// bound before); the last, Counts[len(Bounds)], the waits above every
	// bound.
	Counts [numWaitBuckets]uint64
	// Count is the number of waits: the sum of Counts.
	Count uint64
	// Sum is the total of the waits. It saturates after 292 years.
	Sum time.Duration
}

// Stats returns a snapshot of the transport's counters.
func (t *Transport) Stats() Stats {
	s := Stats{Rules: make([]RuleStats, len(t.stats)), Unmatched: t.unmatchedStats.snapshot()}
	for i, rs := range t.stats {
		s.Rules[i] = rs.snapshot()
	}
	return s
}

// ruleStats is the counters of a rule name: written with atomic adds on the
// request path, read by Stats.
type ruleStats struct {
	name     string
	shadow   bool
	outcomes [numOutcomes]atomic.Uint64 // but Sent: the sum of wait
	wait     waitCounter                // lanestats.go
	retakes  atomic.Uint64

	refused, open, local atomic.Uint64

	tooMany, unavailable, refusals, pauses, tightenings, reshapes atomic.Uint64
	widenings, easings                                            atomic.Uint64

	leases        engine.LeaseCounters // held, queued, lost, reclaimed: the engine's
	leasesRefused atomic.Uint64

	recent *recent // the sends of the last windows (saturation.go); nil for unmatched requests

	lanes   []laneCounters // per lane, for a rule with lanes (lanestats.go)
	tenants *tenantStats   // the busiest tenants' rows, for a rule with tenants
}

// bindStats gives every rule the counters of its name, shared by the rules of
// the same name, and returns them in the order of Stats.Rules.
func bindStats(rules []*rule, def *rule) []*ruleStats {
	var list []*ruleStats
	byName := map[string]*ruleStats{}
	for _, r := range append(rules[:len(rules):len(rules)], def) {
		if r == nil {
			continue
		}
		s := byName[r.Name]
		if s == nil {
			s = &ruleStats{name: r.Name, shadow: r.Shadow, recent: newRecent(r)}
			byName[r.Name] = s
			list = append(list, s)
		}
		if r.plan.Lanes > len(s.lanes) {
			s.lanes = make([]laneCounters, r.plan.Lanes)
		}
		if r.plan.Tenants && s.tenants == nil {
			s.tenants = newTenantStats()
		}
		r.stats = s
		r.plan.Leases = &s.leases
	}
	return list
}

// record counts d. A request sent is counted once, in its wait bucket: the
// buckets sum to Requests[Sent], which saves the allowed path an atomic add.
func (s *ruleStats) record(d Decision) {
	switch {
	case d.Outcome == Sent:
		s.wait.add(d.Delay)
	case d.Outcome >= 0 && int(d.Outcome) < numOutcomes:
		s.outcomes[d.Outcome].Add(1)
	}
	switch d.Outcome {
	case FailedOpen:
		s.open.Add(1)
	case Failed:
		if !d.Local && errors.Is(d.Err, ErrStoreUnavailable) {
			s.refused.Add(1)
		}
	}
	if d.Retaken > 0 {
		s.retakes.Add(uint64(d.Retaken))
	}
	if d.Local {
		s.local.Add(1)
	}
	if d.InFlight && d.Outcome == Limited {
		s.leasesRefused.Add(1)
	}
	if s.lanes != nil {
		noteLane(s.lanes, d)
	}
}

// count counts resp when it is a refusal: a 429, a 503, or another that
// a rule's Refused describes.
func (s *ruleStats) count(resp *http.Response, refused bool) {
	switch {
	case !refused:
	case resp.StatusCode == http.StatusTooManyRequests:
		s.tooMany.Add(1)
	case resp.StatusCode == http.StatusServiceUnavailable:
		s.unavailable.Add(1)
	default:
		s.refusals.Add(1)
	}
}

func (s *ruleStats) snapshot() RuleStats {
	r := RuleStats{Rule: s.name, Shadow: s.shadow, Retakes: s.retakes.Load()}
	r.Store.Refused, r.Store.Open, r.Store.Local = s.refused.Load(), s.open.Load(), s.local.Load()
	u := &r.Upstream
	u.TooManyRequests, u.Unavailable, u.Refusals = s.tooMany.Load(), s.unavailable.Load(), s.refusals.Load()
	u.Pauses, u.Tightenings, u.Reshapes = s.pauses.Load(), s.tightenings.Load(), s.reshapes.Load()
	u.Widenings, u.Easings = s.widenings.Load(), s.easings.Load()
	f := &r.InFlight
	f.Held, f.Queued, f.Refused = s.leases.Held.Load(), s.leases.Queued.Load(), s.leasesRefused.Load()
	f.Lost, f.Reclaimed = s.leases.Lost.Load(), s.leases.Reclaimed.Load()
	for i := range s.outcomes {
		r.Requests[i] = s.outcomes[i].Load()
	}
	r.Wait = s.wait.read()
	r.Requests[Sent] = r.Wait.Count
	s.recent.read(&r)
	r.Lanes = readLanes(s.lanes)
	s.tenants.read(&r)
	return r
}

func (r *RuleStats) add(o RuleStats) {
	if r.Wait.Bounds == nil {
		r.Wait.Bounds = slices.Clone(o.Wait.Bounds)
	}
	for i := range r.Requests {
		r.Requests[i] += o.Requests[i]
	}
	for i := range r.Wait.Counts {
		r.Wait.Counts[i] += o.Wait.Counts[i]
	}
	r.Wait.Count += o.Wait.Count
	r.Wait.Sum = time.Duration(min(uint64(r.Wait.Sum)+uint64(o.Wait.Sum), math.MaxInt64))
	r.Retakes += o.Retakes
	r.Store.Refused += o.Store.Refused
	r.Store.Open += o.Store.Open
	r.Store.Local += o.Store.Local
	r.Upstream.TooManyRequests += o.Upstream.TooManyRequests
	r.Upstream.Unavailable += o.Upstream.Unavailable
	r.Upstream.Refusals += o.Upstream.Refusals
	r.Upstream.Pauses += o.Upstream.Pauses
	r.Upstream.Tightenings += o.Upstream.Tightenings
	r.Upstream.Reshapes += o.Upstream.Reshapes
	r.Upstream.Widenings += o.Upstream.Widenings
	r.Upstream.Easings += o.Upstream.Easings
	r.InFlight.Held += o.InFlight.Held
	r.InFlight.Queued += o.InFlight.Queued
	r.InFlight.Refused += o.InFlight.Refused
	r.InFlight.Lost += o.InFlight.Lost
	r.InFlight.Reclaimed += o.InFlight.Reclaimed
}
