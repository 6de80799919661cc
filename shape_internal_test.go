package throttle

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/upstream"
	"github.com/throttle-go/throttle/store"
)

// The stricter shape is the rule's own rate without a burst, never slower:
// the paced limit's spacing (the default pace's too), or the shortest
// window's, Margin included.
func TestShapeFor(t *testing.T) {
	t.Parallel()
	sec := time.Second + DefaultMargin
	for _, c := range []struct {
		name string
		rule Rule
		want Limit // zero: none
		own  bool
	}{
		{"a window: paced at its rate", Rule{Limits: []Limit{PerSecond(100)}}, Paced(100, sec, 0), false},
		{"windows in bursts: the shortest", Rule{Limits: []Limit{PerHour(5000), PerSecond(10), Per(5, time.Second)}, NoDefaultPace: true}, Paced(5, sec, 0), false},
		{"the default pace, of the slowest limit: its burst goes", Rule{Limits: []Limit{PerHour(5000), PerSecond(10)}}, Paced(5000, time.Hour+DefaultMargin, 0), false},
		{"paced with a burst: the burst goes", Rule{Limits: []Limit{PerSecond(100), Paced(50, time.Second, 9)}}, Paced(50, sec, 0), false},
		{"paced without a burst: its own", Rule{Limits: []Limit{PerSecond(100), Paced(100, time.Second, 0)}}, Paced(100, sec, 0), true},
		{"a counting algorithm ignores a pace", Rule{Limits: []Limit{PerSecond(100)}, Algorithm: FixedWindow}, Limit{}, false},
		{"NoMargin", Rule{Limits: []Limit{PerSecond(10)}, Margin: NoMargin}, Paced(10, time.Second, 0), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.rule.Host = "h"
			r, err := compile(c.rule, false)
			require.NoError(t, err)
			got, own, ok := r.shapeFor()
			assert.Equal(t, c.want.N > 0, ok)
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.own, own)
		})
	}
}

// A 429 despite compliance adds the pace; a pause the upstream did not
// state shortens to two spacings, a stated one is kept. A 429 to a request
// sent under the pace slows it, with no spread measured, by 1 % and then
// twice what was added, up to the pace halved; one sent before the move
// (the same burst) does not.
func TestReshape(t *testing.T) {
	t.Parallel()
	r, err := compile(Rule{Host: "h", Limits: []Limit{PerSecond(100)}}, false)
	require.NoError(t, err)
	sec := time.Second + DefaultMargin
	pace := Paced(100, sec, 0)
	spacings := func(p Limit) time.Duration { return 2 * ((p.Per + 99) / 100) }
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		kv    []string
		pause time.Duration
	}{
		{"no stated wait: two spacings", nil, spacings(pace)},
		{"Retry-After is kept whole", []string{"Retry-After", "1"}, time.Second},
		{"a budget's reset is kept whole", []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "4"}, 4 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i < len(c.kv); i += 2 {
				h.Set(c.kv[i], c.kv[i+1])
			}
			var f feedbackState
			sig := upstream.ReadHeaders(h, now)
			sig.Refused = true
			l := r.dialect.Learn(sig)
			f.reshape(r, "k", sig, now.Add(-time.Millisecond), now, 0, &l)
			assert.Equal(t, pace, Limit(l.Pace))
			assert.Equal(t, 10*time.Minute, l.PaceTTL)
			assert.Equal(t, c.pause, l.Pause)
			require.NoError(t, l.Validate("k"))
		})
	}

	var f feedbackState
	sig := upstream.ReadHeaders(http.Header{}, now)
	sig.Refused = true
	first := r.dialect.Learn(sig)
	f.reshape(r, "k", sig, now.Add(-time.Millisecond), now, 0, &first)
	assert.Equal(t, spacings(pace), first.Pause)
	same := r.dialect.Learn(sig)
	f.reshape(r, "k", sig, now.Add(-time.Millisecond), now.Add(time.Millisecond), 0, &same)
	assert.Equal(t, pace, Limit(same.Pace), "a 429 of the same burst, sent before the move")
	at := now
	for i, share := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 100} {
		at = at.Add(100 * time.Millisecond)
		later := r.dialect.Learn(sig)
		f.reshape(r, "k", sig, at.Add(-time.Millisecond), at, 0, &later)
		want := Paced(100, sec+sec/100*share, 0)
		assert.Equal(t, want, Limit(later.Pace), "the %d-th 429 sent under the pace", i+1)
		assert.Equal(t, spacings(want), later.Pause)
	}
	other := r.dialect.Learn(sig)
	f.reshape(r, "other", sig, now.Add(100*time.Millisecond), now.Add(101*time.Millisecond), 0, &other)
	assert.Equal(t, pace, Limit(other.Pace), "per key")
	expired := r.dialect.Learn(sig)
	f.reshape(r, "k", sig, now.Add(11*time.Minute), now.Add(11*time.Minute), 0, &expired)
	assert.Equal(t, pace, Limit(expired.Pace), "a new move once the last one's TTL is over")

	// Under the pace, a refusal whose only stated wait is Retry-After: 1
	// (a strict spacing's next slot, rounded up to the second) pauses two
	// spacings; another within that second, to a request due after it, says
	// the upstream is exhausted: its second is kept whole. One of the same
	// burst (due before) does not count; a second later it shortens again.
	// The move's own refusal, a fractional wait, a longer one and an
	// exhausted budget are kept whole.
	head := func(kv ...string) upstream.Said {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		sig := upstream.ReadHeaders(h, now)
		sig.Refused = true
		return sig
	}
	ra := head("Retry-After", "1")
	var g feedbackState
	ms := time.Millisecond
	for _, c := range []struct {
		name    string
		sig     upstream.Said
		due, at time.Duration
		pause   time.Duration
	}{
		{"the move: kept whole", ra, -ms, 0, time.Second},
		{"under the pace: two spacings", ra, 1100 * ms, 1110 * ms, spacings(slowedBy(pace, 1))},
		{"the same burst: two spacings", ra, 1105 * ms, 1112 * ms, spacings(slowedBy(pace, 1))},
		{"again within the second: kept whole", ra, 1150 * ms, 1160 * ms, time.Second},
		{"a second later: two spacings", ra, 2200 * ms, 2210 * ms, spacings(slowedBy(pace, 4))},
		{"a fractional wait: kept whole", head("Retry-After", "0.5"), 3300 * ms, 3310 * ms, 500 * ms},
		{"two seconds: kept whole", head("Retry-After", "2"), 4400 * ms, 4410 * ms, 2 * time.Second},
		{"a budget exhausted: kept whole", head("Retry-After", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "4"), 6500 * ms, 6510 * ms, 4 * time.Second},
		{"a global limit: kept whole", head("Retry-After", "1", "X-RateLimit-Global", "true"), 7600 * ms, 7610 * ms, time.Second},
	} {
		l := r.dialect.Learn(c.sig)
		g.reshape(r, "r", c.sig, now.Add(c.due), now.Add(c.at), 0, &l)
		assert.Equal(t, c.pause, l.Pause, c.name)
	}

	// A process's first refusal on a slot reserved under a learned pace
	// (another process's move) slows it and, stating a second, pauses two
	// spacings; its own waiters take their slots anew under it.
	var other2 feedbackState
	l2 := r.dialect.Learn(ra)
	assert.True(t, other2.reshape(r, "p", ra, now.Add(-ms), now, sec/100, &l2), "news to this process")
	assert.Equal(t, slowedBy(pace, 1), Limit(l2.Pace))
	assert.Equal(t, spacings(slowedBy(pace, 1)), l2.Pause)

	// Under a slower pace than the rule's (one a route bucket's headers
	// stated), a 429 slows that pace: never back to the rule's rate.
	var bucket feedbackState
	lb := r.dialect.Learn(ra)
	bucket.reshape(r, "b", ra, now.Add(-ms), now, time.Second, &lb)
	assert.Equal(t, slowedBy(Paced(100, 100*time.Second, 0), 1), Limit(lb.Pace), "the pace that held, slowed")
	pr, ok := bucket.probe(r, "b", 1010*time.Millisecond, now.Add(11*time.Second))
	require.True(t, ok, "probed after ten quiet spacings")
	assert.Equal(t, Paced(100, 100*time.Second, 0), Limit(pr.Pace), "back to the pace that held, not the rule's")

	own, err := compile(Rule{Host: "h", Limits: []Limit{Paced(100, time.Second, 0)}}, false)
	require.NoError(t, err)
	l := own.dialect.Learn(sig)
	f.reshape(own, "o", sig, now, now, 0, &l)
	assert.Equal(t, Paced(100, sec+sec/100, 0), Limit(l.Pace), "paced so already: slowed at the first 429")

	fixed, err := compile(Rule{Host: "h", Limits: []Limit{PerSecond(100)}, Algorithm: FixedWindow}, false)
	require.NoError(t, err)
	l = fixed.dialect.Learn(sig)
	f.reshape(fixed, "f", sig, now, now, 0, &l)
	assert.Equal(t, contract.Learned{Pause: sec}, l, "a counting algorithm: the pause alone")
}

// slowedBy returns p with its spacing longer by share %.
func slowedBy(p Limit, share time.Duration) Limit {
	p.Per += p.Per / 100 * share
	return p
}

// A 429 under the learned pace slows it by the spread this transport
// measured from its slots to the answers (2ms here, a fifth of the
// spacing), not by 1 %; a further one doubles what was added, up to the
// pace halved; one to a request reserved under an earlier pace asks for no
// more than holds. After the quiet time without a refusal, each response
// probes the pace back towards the rule's until its requests are reserved
// under the rule's spacing again.
func TestSlowingCoversTheSpread(t *testing.T) {
	t.Parallel()
	r, err := compile(Rule{Host: "h", Limits: []Limit{PerSecond(100)}}, false) // the default margin and pace
	require.NoError(t, err)
	sec := time.Second + DefaultMargin
	pace := Paced(100, sec, 0)
	spacing := sec / 100
	ms := time.Millisecond
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var f feedbackState
	for i := range 100 { // answers 0.5ms to 2.5ms after their slots
		f.measure(r, now.Add(-ms/2-time.Duration(i%5)*ms/2), now)
	}
	sig := upstream.ReadHeaders(http.Header{}, now)
	sig.Refused = true
	refuse := func(due, at time.Time, paced time.Duration) Limit {
		l := r.dialect.Learn(sig)
		f.reshape(r, "k", sig, due, at, paced, &l)
		return Limit(l.Pace)
	}
	assert.Equal(t, pace, refuse(now.Add(-ms), now, 0), "the move: the rule's rate")
	at := now
	held := spacing
	for i, added := range []time.Duration{2 * ms, 4 * ms, 8 * ms, spacing, spacing} {
		at = at.Add(100 * ms)
		got := refuse(at.Add(-ms), at, held)
		assert.Equal(t, Paced(100, sec+100*added, 0), got, "the %d-th 429 under the pace", i+1)
		held = got.Per / 100
	}
	assert.Equal(t, Paced(100, sec+100*4*ms, 0), refuse(at.Add(-ms), at.Add(ms), spacing+2*ms),
		"reserved under an earlier pace: no slower than that pace slowed once more")

	// Probes: after the quiet time, each response reserved under a slower
	// pace than the rule's probes towards the rule's; one reserved under
	// it ends the probing.
	probe := func(paced time.Duration) bool {
		at = at.Add(probeQuiet)
		pr, ok := f.probe(r, "k", paced, at)
		if ok {
			assert.Equal(t, contract.Learned{Pace: contract.Limit(pace), PaceTTL: shapeTTL(pace), Probe: probeQuiet}, pr)
		}
		return ok
	}
	assert.True(t, probe(2*spacing), "the pace halved")
	assert.True(t, probe(spacing+spacing/2), "halfway back")
	assert.True(t, probe(spacing+spacing/4), "a quarter above")
	assert.False(t, probe(spacing), "back at the rule's rate")
	assert.False(t, probe(2*spacing), "done until it slows the pace again")
}

// A rule that states no shape keeps a pace beside its windows: at its
// slowest limit's rate, with a burst of defaultBurst, earned (SlowStart), or
// of N where its window alone holds a burst to N; none where it states one.
func TestDefaultPace(t *testing.T) {
	t.Parallel()
	slow := func(l Limit) Limit {
		l.SlowStart = true
		return l
	}
	for _, c := range []struct {
		name string
		rule Rule
		want Limit // zero: none
	}{
		{"a window", Rule{Limits: []Limit{PerSecond(100)}}, slow(Paced(100, time.Second, defaultBurst))},
		{"the slowest of several", Rule{Limits: []Limit{PerSecond(10), PerHour(5000)}}, slow(Paced(5000, time.Hour, defaultBurst))},
		{"the slowest of equal windows", Rule{Limits: []Limit{Per(50, time.Second), Per(20, time.Second)}}, slow(Paced(20, time.Second, defaultBurst))},
		{"N of 10: the window holds the burst", Rule{Limits: []Limit{PerSecond(10)}}, Paced(10, time.Second, 10)},
		{"a fast limit: 50ms of sends", Rule{Limits: []Limit{PerSecond(10000)}}, slow(Paced(10000, time.Second, 500))},
		{"faster than the span: the window's N", Rule{Limits: []Limit{Per(1<<30, 10*time.Millisecond)}}, Paced(1<<30, 10*time.Millisecond, 1<<30)},
		{"N of 2", Rule{Limits: []Limit{PerMinute(2)}}, Paced(2, time.Minute, 2)},
		{"N of 1: the window spaces it", Rule{Limits: []Limit{PerSecond(1)}}, Limit{}},
		{"NoDefaultPace", Rule{Limits: []Limit{PerSecond(100)}, NoDefaultPace: true}, Limit{}},
		{"a paced limit of its own", Rule{Limits: []Limit{PerSecond(100), Paced(100, time.Second, 0)}}, Limit{}},
		{"a counting algorithm", Rule{Limits: []Limit{PerSecond(100)}, Algorithm: FixedWindow}, Limit{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.rule.Host = "h"
			r, err := compile(c.rule, false)
			require.NoError(t, err)
			if c.want.N == 0 {
				assert.Equal(t, -1, r.auto)
				assert.Len(t, r.eff, len(c.rule.Limits))
				return
			}
			require.Equal(t, len(c.rule.Limits), r.auto, "after the rule's own limits")
			want := c.want
			want.Per += DefaultMargin
			assert.Equal(t, want, r.eff[r.auto])
			assert.Equal(t, r.eff[:r.auto], r.windows())
			assert.Equal(t, DefaultMargin/2, r.retake, "the default pace states no limit")
			assert.Equal(t, DefaultMargin/time.Duration(2*c.want.N), r.pacedRetake, "a pace's retake, under a learned pace")
		})
	}
}

// A request that costs more than the default pace's burst + 1 goes as one
// send: its units are not spaced from each other (as under a learned pace).
func TestDefaultPaceCost(t *testing.T) {
	t.Parallel()
	r, err := compile(Rule{Host: "h", Limits: []Limit{PerSecond(100)}}, false)
	require.NoError(t, err)
	assert.Equal(t, 100, r.minN, "the pace does not bound the cost")
	assert.Same(t, &r.plan.Limits[0], &r.plan.LimitsFor(defaultBurst + 1)[0], "within the burst: the rule's limits")
	got := r.plan.LimitsFor(40)
	assert.Equal(t, 39, got[r.auto].Burst)
	assert.Equal(t, defaultBurst, r.eff[r.auto].Burst, "the rule's limits unchanged")
	require.NoError(t, (&contract.Request{Limits: got, Cost: 40}).Validate("t"))
}

// The default pace's burst absorbs an allowance: a fast limit's requests at
// once, reserved with a 2ms allowance, are spaced one spacing apart from the
// first (its burst is earned), not one spacing and an allowance (with a
// burst of 9 at 10,000 per second, the second would wait 2.1ms).
func TestDefaultPaceAbsorbsTheAllowance(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, err := compile(Rule{Host: "h", Limits: []Limit{PerSecond(10000)}}, false)
		require.NoError(t, err)
		m, err := store.NewMemory()
		require.NoError(t, err)
		for i := range 400 {
			res, err := m.Reserve(context.Background(), "k", contract.Request{Limits: r.plan.LimitsFor(1), Cost: 1, MaxWait: time.Second, Allowance: 2 * time.Millisecond})
			require.NoError(t, err)
			require.True(t, res.Allowed, "request %d", i)
			// (1s + 5ms)/10,000, rounded up to whole microseconds.
			require.Equal(t, time.Duration(i)*101*time.Microsecond, res.Delay, "request %d", i)
		}
	})
}
