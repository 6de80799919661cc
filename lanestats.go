package throttle

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the counts per lane and per tenant of a rule
// (RuleStats.Lanes, RuleStats.Tenants). A lane's are atomic counters, as a
// rule's. A rule's tenants may be many, so only the few that sent the most
// lately have counts of their own (rows); every other tenant is counted in
// one row. The busy tenants that are not rows are found with a space-saving
// sketch (Metwally, Agrawal and El Abbadi, 2005) of a fixed number of
// candidates: the memory, and the labels an adapter exports, are bounded
// whatever the number of tenants.

const (
	// topTenants is the most tenants of a rule with a row of their own: a
	// dashboard's legend stays readable, and an adapter exports at most
	// topTenants+1 values of a tenant label per rule.
	topTenants = 10
	// tenantCandidates is the capacity of the sketch: a tenant that sent
	// more than 1/64 of the recent units is in it, whatever the number of
	// tenants.
	tenantCandidates = 64
	// tenantPeriod is the half-life of the recent units that rank the
	// tenants, and the window of TenantStats.Share.
	tenantPeriod = time.Minute
	// A candidate takes the place of the row that sent the least lately
	// when it surely sent at least promoteMin units lately, and more than
	// promoteFactor times that row's. The factor keeps the rows of tenants
	// of about equal weight from trading places at every request: the set
	// of rows changes only when the load does.
	promoteMin    = 4
	promoteFactor = 2
)

// otherTenants is the name of the row of the tenants without a row of
// their own.
const otherTenants = "(other)"

// LaneStats counts what happened to the requests of one lane of a rule
// (Rule.Lanes).
type LaneStats struct {
	Lane int
	// Sent and Limited count the requests of the lane sent and refused by
	// a limit.
	Sent, Limited uint64
	// Wait is the distribution of the waits of the requests sent (its
	// Count is Sent).
	Wait WaitHistogram
	// Took counts the requests of the lane sent on the slot of a waiting
	// request of a lower lane (Decision.Took).
	Took uint64
	// Bumped counts the times a higher lane took the slot a request of the
	// lane waited for (Decision.Bumped, summed).
	Bumped uint64
}

// TenantStats counts what happened to the requests of one tenant of a rule
// (Rule.Tenant), or of all the tenants without a row of their own.
type TenantStats struct {
	// Tenant is the tenant's name as Decision.Tenant reports it (hashed
	// when it comes from a secret), or "(other)" for the row of the other
	// tenants (Other set). A tenant named "(other)" is reported by the hash
	// of its name.
	Tenant string
	// Other is set on the row of the tenants without a row of their own.
	Other bool
	// Sent and Limited count the requests sent and refused by a limit,
	// since the tenant got its row.
	Sent, Limited uint64
	// Wait is the distribution of the waits of the requests sent (its
	// Count is Sent).
	Wait WaitHistogram
	// Bumped counts the times another tenant's earlier turn took the slot
	// a request of the tenant waited for (Decision.Bumped, summed).
	Bumped uint64
	// Share is the tenant's part of the units the rule's tenants sent in
	// the last minute (0 to 1), counting the tenant's since it got its
	// row.
	Share float64
}

// waitCounter counts waits into a histogram with atomic adds.
type waitCounter struct {
	n   [numWaitBuckets]atomic.Uint64
	sum atomic.Uint64 // nanoseconds
}

// add counts a wait of d: one add when d is zero, two otherwise.
func (w *waitCounter) add(d time.Duration) {
	w.n[waitBucket(d)].Add(1)
	if d > 0 {
		w.sum.Add(uint64(d))
	}
}

// read returns the histogram of the waits counted.
func (w *waitCounter) read() WaitHistogram {
	h := WaitHistogram{Bounds: slices.Clone(waitBounds[:])}
	for i := range w.n {
		h.Counts[i] = w.n[i].Load()
		h.Count += h.Counts[i]
	}
	h.Sum = time.Duration(min(w.sum.Load(), math.MaxInt64))
	return h
}

// laneCounters is the counters of one lane.
type laneCounters struct {
	wait                  waitCounter
	limited, took, bumped atomic.Uint64
}

// noteLane counts d in its lane's counters, if the rule has lanes.
func noteLane(lanes []laneCounters, d Decision) {
	if d.Lane < 0 || d.Lane >= len(lanes) {
		return
	}
	c := &lanes[d.Lane]
	switch d.Outcome {
	case Sent:
		c.wait.add(d.Delay)
	case Limited:
		c.limited.Add(1)
	}
	if d.Took {
		c.took.Add(1)
	}
	if d.Bumped > 0 {
		c.bumped.Add(uint64(d.Bumped))
	}
}

// readLanes returns the counts of each lane.
func readLanes(lanes []laneCounters) []LaneStats {
	if lanes == nil {
		return nil
	}
	s := make([]LaneStats, len(lanes))
	for i := range lanes {
		c := &lanes[i]
		s[i] = LaneStats{Lane: i, Limited: c.limited.Load(), Wait: c.wait.read(),
			Took: c.took.Load(), Bumped: c.bumped.Load()}
		s[i].Sent = s[i].Wait.Count
	}
	return s
}

// tenantStats is the rows of a rule's tenants. A short lock per decision.
type tenantStats struct {
	mu     sync.Mutex
	now    func() time.Time // the engine's clock, from the first decision
	period int64            // the period of now, since the epoch: the rank's decay
	rows   []tenantRow      // the tenants with a row, at most topTenants
	other  tenantRow        // every other tenant
	total  window           // the units every tenant sent: Share's denominator
	sketch sketch           // the candidates for a row
}

// tenantRow is the counts of one row.
type tenantRow struct {
	name                  string
	sent, limited, bumped uint64
	waits                 [numWaitBuckets]uint64
	waitSum               uint64
	rank                  float64 // units sent lately: halved every tenantPeriod
	recent                window  // units sent in the last tenantPeriod
}

func newTenantStats() *tenantStats {
	t := &tenantStats{rows: make([]tenantRow, 0, topTenants), other: newTenantRow(otherTenants, 0)}
	t.total.per = tenantPeriod
	t.sketch.idx = make(map[string]int, tenantCandidates)
	t.sketch.c = make([]candidate, 0, tenantCandidates)
	return t
}

func newTenantRow(name string, rank float64) tenantRow {
	return tenantRow{name: name, rank: rank, recent: window{per: tenantPeriod}}
}

// note counts d, a decision of a rule with tenants.
func (t *tenantStats) note(now func() time.Time, d Decision) {
	if t == nil || d.Tenant == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = now
	at := now()
	t.roll(at)
	row := t.row(d.Tenant)
	row.count(at, d)
	if d.Outcome != Sent {
		return
	}
	units := float64(d.Cost)
	t.total.add(at, units, 0)
	if row == &t.other {
		t.consider(d.Tenant, units)
	}
}

// row returns the row of tenant: its own, a new one while there is room,
// else the others'.
func (t *tenantStats) row(tenant string) *tenantRow {
	for i := range t.rows {
		if t.rows[i].name == tenant {
			return &t.rows[i]
		}
	}
	if len(t.rows) < topTenants {
		c, _ := t.sketch.remove(tenant)
		t.rows = append(t.rows, newTenantRow(tenant, c.sure()))
		return &t.rows[len(t.rows)-1]
	}
	return &t.other
}

// count counts d in r.
func (r *tenantRow) count(at time.Time, d Decision) {
	switch d.Outcome {
	case Sent:
		r.sent++
		r.waits[waitBucket(d.Delay)]++
		if d.Delay > 0 {
			r.waitSum += uint64(d.Delay)
		}
		r.rank += float64(d.Cost)
		r.recent.add(at, float64(d.Cost), 0)
	case Limited:
		r.limited++
	}
	r.bumped += uint64(max(d.Bumped, 0))
}

// consider counts units sent by tenant, which has no row, in the sketch,
// and gives it the row of the tenant that sent the least lately when it
// surely sent more than promoteFactor times as much. That row's tenant
// becomes a candidate again, and its counts are dropped: a series of a
// counter that vanishes is read as ended, one that jumped would be a burst
// that never was.
func (t *tenantStats) consider(tenant string, units float64) {
	c := t.sketch.add(tenant, units)
	sure := c.sure()
	if sure < promoteMin {
		return
	}
	least := 0
	for i := range t.rows {
		if t.rows[i].rank < t.rows[least].rank {
			least = i
		}
	}
	if sure <= promoteFactor*t.rows[least].rank {
		return
	}
	t.sketch.remove(tenant)
	old := t.rows[least]
	t.sketch.put(old.name, old.rank)
	t.rows[least] = newTenantRow(tenant, sure)
}

// roll halves the ranks once per tenantPeriod passed since the last
// decision.
func (t *tenantStats) roll(at time.Time) {
	p := at.UnixNano() / int64(tenantPeriod)
	if p <= t.period {
		return
	}
	if t.period != 0 {
		f := math.Ldexp(1, -int(min(p-t.period, 1000))) // 2^-periods; zero after many
		for i := range t.rows {
			t.rows[i].rank *= f
		}
		t.sketch.decay(f)
	}
	t.period = p
}

// read fills s.Tenants: the rows, those that sent the most lately first,
// then the others'.
func (t *tenantStats) read(s *RuleStats) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var at time.Time
	var total float64
	if t.now != nil {
		at = t.now()
		total = t.total.sum(at)[0]
	}
	rows := make([]*tenantRow, 0, len(t.rows)+1)
	for i := range t.rows {
		rows = append(rows, &t.rows[i])
	}
	slices.SortStableFunc(rows, func(a, b *tenantRow) int {
		if a.rank != b.rank {
			if a.rank > b.rank {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	rows = append(rows, &t.other)
	s.Tenants = make([]TenantStats, len(rows))
	for i, r := range rows {
		ts := TenantStats{Tenant: r.name, Other: r == &t.other, Sent: r.sent, Limited: r.limited, Bumped: r.bumped}
		if !ts.Other && ts.Tenant == otherTenants {
			ts.Tenant = hashed("sha256:", ts.Tenant) // one label value per row
		}
		ts.Wait = WaitHistogram{Bounds: slices.Clone(waitBounds[:]), Counts: r.waits, Count: r.sent,
			Sum: time.Duration(min(r.waitSum, math.MaxInt64))}
		if total > 0 {
			ts.Share = min(r.recent.sum(at)[0]/total, 1)
		}
		s.Tenants[i] = ts
	}
}

// sketch is a space-saving sketch: at most tenantCandidates tenants and an
// upper bound of the units each sent lately. A tenant not in a full sketch
// replaces the one of the least count, and inherits that count as its error.
type sketch struct {
	idx map[string]int // name → index in c
	c   []candidate
}

// candidate is a tenant in the sketch: it sent at most count units lately,
// and at least count-err.
type candidate struct {
	name       string
	count, err float64
}

// sure is the units c surely sent lately.
func (c candidate) sure() float64 { return c.count - c.err }

// add counts units sent by name, and returns its candidate.
func (s *sketch) add(name string, units float64) candidate {
	if i, ok := s.idx[name]; ok {
		s.c[i].count += units
		return s.c[i]
	}
	if len(s.c) < tenantCandidates {
		s.c = append(s.c, candidate{name: name, count: units})
		s.idx[name] = len(s.c) - 1
		return s.c[len(s.c)-1]
	}
	i := s.least()
	delete(s.idx, s.c[i].name)
	s.c[i] = candidate{name: name, count: s.c[i].count + units, err: s.c[i].count}
	s.idx[name] = i
	return s.c[i]
}

// put adds name, known to have sent count units lately, if it has room or
// sent more than the least.
func (s *sketch) put(name string, count float64) {
	if len(s.c) < tenantCandidates {
		s.c = append(s.c, candidate{name: name, count: count})
		s.idx[name] = len(s.c) - 1
		return
	}
	if i := s.least(); count > s.c[i].count {
		delete(s.idx, s.c[i].name)
		s.c[i] = candidate{name: name, count: count}
		s.idx[name] = i
	}
}

// remove takes name out of the sketch, and returns its candidate.
func (s *sketch) remove(name string) (candidate, bool) {
	i, ok := s.idx[name]
	if !ok {
		return candidate{}, false
	}
	c, last := s.c[i], len(s.c)-1
	delete(s.idx, name)
	if i != last {
		s.c[i] = s.c[last]
		s.idx[s.c[i].name] = i
	}
	s.c = s.c[:last]
	return c, true
}

// least returns the index of the candidate of the least count.
func (s *sketch) least() int {
	m := 0
	for i := range s.c {
		if s.c[i].count < s.c[m].count {
			m = i
		}
	}
	return m
}

// decay multiplies every count by f.
func (s *sketch) decay(f float64) {
	for i := range s.c {
		s.c[i].count *= f
		s.c[i].err *= f
	}
}
