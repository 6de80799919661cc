package throttle

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeNow is a clock the test moves.
type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time { return f.t }

// tenantNames returns the names of the rows of s, in its order.
func tenantNames(s RuleStats) []string {
	var names []string
	for _, t := range s.Tenants {
		names = append(names, t.Tenant)
	}
	return names
}

// TestTenantRowsFollowTheLoad: ten tenants that sent ten requests each in
// the first minute hold the rows; a newcomer sending ten a minute gets the
// row of the least busy once their sends have halved twice and its own
// count surely exceeds twice theirs, and not before; an idle row keeps its
// place until then. Shares are of the last minute.
func TestTenantRowsFollowTheLoad(t *testing.T) {
	t.Parallel()
	clock := &fakeNow{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts := newTenantStats()
	sent := func(tenant string) { ts.note(clock.now, Decision{Outcome: Sent, Cost: 1, Tenant: tenant}) }
	for i := range topTenants {
		for range 10 - i { // r0 sends 10, r9 sends 1
			sent(fmt.Sprintf("r%d", i))
		}
	}
	var s RuleStats
	ts.read(&s)
	require.Len(t, s.Tenants, topTenants+1)
	assert.Equal(t, "r0", s.Tenants[0].Tenant)
	assert.Equal(t, "r9", s.Tenants[9].Tenant)
	assert.InDelta(t, 10.0/55, s.Tenants[0].Share, 1e-9)

	// Minute 1: r9's rank is 0.5; the newcomer must surely have sent
	// more than 1, and at least 4.
	clock.t = clock.t.Add(tenantPeriod)
	for range 3 {
		sent("new")
	}
	ts.read(&s)
	assert.NotContains(t, tenantNames(s), "new", "3 sends are not enough")
	assert.Equal(t, uint64(3), s.Tenants[topTenants].Sent)
	sent("new")
	ts.read(&s)
	assert.Contains(t, tenantNames(s), "new", "its fourth send gives it r9's row")
	assert.NotContains(t, tenantNames(s), "r9")
	assert.Equal(t, uint64(0), s.Tenants[slicesIndex(tenantNames(s), "new")].Sent, "a row counts from the next send")
	assert.Equal(t, uint64(4), s.Tenants[topTenants].Sent, "the others' row keeps what it counted")

	// r9 comes back with two sends: with its 0.5 of before, 2.5 is short
	// of 4; it stays a candidate.
	sent("r9")
	sent("r9")
	ts.read(&s)
	assert.NotContains(t, tenantNames(s), "r9")

	// The share is of the last minute: the first minute's sends are gone.
	clock.t = clock.t.Add(tenantPeriod)
	sent("new")
	ts.read(&s)
	i := slicesIndex(tenantNames(s), "new")
	assert.Equal(t, 1.0, s.Tenants[i].Share)
	assert.Equal(t, uint64(1), s.Tenants[i].Sent)
}

func slicesIndex(s []string, v string) int {
	for i := range s {
		if s[i] == v {
			return i
		}
	}
	return -1
}

// TestTenantStatsBounded: 10,000 tenants sending alike never hold more than
// topTenants rows and tenantCandidates candidates, and the rows do not
// trade places when no tenant is busier than another.
func TestTenantStatsBounded(t *testing.T) {
	t.Parallel()
	clock := &fakeNow{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts := newTenantStats()
	for round := range 5 {
		for i := range 10000 {
			ts.note(clock.now, Decision{Outcome: Sent, Cost: 1, Tenant: fmt.Sprintf("t%d", i)})
			if i%1000 == 0 {
				clock.t = clock.t.Add(time.Second)
			}
		}
		var s RuleStats
		ts.read(&s)
		require.Len(t, s.Tenants, topTenants+1, "round %d", round)
		for i := range topTenants {
			assert.Equal(t, uint64(round+1), s.Tenants[i].Sent, "round %d: the first ten keep their rows", round)
		}
		assert.LessOrEqual(t, len(ts.sketch.c), tenantCandidates)
		assert.Equal(t, len(ts.sketch.c), len(ts.sketch.idx))
	}
}

// TestSketch: the space-saving sketch keeps a tenant that sent more than
// 1/64 of the units, with an upper bound of its count and a lower one.
func TestSketch(t *testing.T) {
	t.Parallel()
	s := sketch{idx: map[string]int{}}
	for i := range 6400 {
		s.add(fmt.Sprintf("t%d", i), 1)
		if i%32 == 0 {
			s.add("heavy", 1) // 200 of 6,600: more than 1/64
		}
	}
	i, ok := s.idx["heavy"]
	require.True(t, ok)
	c := s.c[i]
	assert.GreaterOrEqual(t, c.count, 200.0)
	assert.LessOrEqual(t, c.sure(), 200.0)
	assert.Greater(t, c.sure(), 100.0)
	got, ok := s.remove("heavy")
	assert.True(t, ok)
	assert.Equal(t, c, got)
	for j, c := range s.c {
		assert.Equal(t, j, s.idx[c.name])
	}
}

// TestLaneRecordDoesNotAllocate: counting a decision of a lane allocates
// nothing.
func TestLaneRecordDoesNotAllocate(t *testing.T) {
	s := ruleStats{lanes: make([]laneCounters, 2)}
	for _, d := range []Decision{
		{Outcome: Sent, Lane: 1, Took: true, Delay: time.Millisecond}, {Outcome: Limited, Lane: 0}, {Outcome: Sent, Bumped: 2},
	} {
		assert.Zero(t, testing.AllocsPerRun(100, func() { s.record(d) }))
	}
	lanes := readLanes(s.lanes)
	assert.Equal(t, uint64(101), lanes[1].Took)
	assert.Equal(t, uint64(202), lanes[0].Bumped)
}

// BenchmarkTenantNote is what counting a decision costs a rule with
// tenants: a tenant with a row, and 10,000 tenants that mostly have none
// (each a candidate of the sketch).
func BenchmarkTenantNote(b *testing.B) {
	names := make([]string, 10000)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%d", i)
	}
	clock := &fakeNow{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, c := range []struct {
		name    string
		tenants int
	}{{"one tenant", 1}, {"10000 tenants", len(names)}} {
		b.Run(c.name, func(b *testing.B) {
			ts, now := newTenantStats(), clock.now
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				ts.note(now, Decision{Outcome: Sent, Cost: 1, Tenant: names[i%c.tenants]})
				i++
			}
		})
	}
}
