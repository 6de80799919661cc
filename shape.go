package throttle

import (
	"math"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/upstream"
)

// This file is the shape of a rule's sends: the pace it keeps by default,
// for an upstream whose way of counting it does not know, and the
// transport's answer to a 429 that came although the fleet
// kept every configured limit (docs/feedback.md, "A 429 despite
// compliance"): the upstream counts differently, a GCRA or a token bucket
// with a small burst, so the key moves fleet-wide to a stricter shape, paced
// at the rule's own rate without a burst (contract.Learned.Pace), instead of
// pausing for a window after each burst that 429s.

// defaultBurst is the least burst of the pace a rule keeps by default (see
// Rule.NoDefaultPace): ten requests at once after an idle spell, as many as a token
// bucket of ten accepts, then evenly spaced.
const defaultBurst = 9

// defaultBurstSpan is how much time the default pace's burst covers at the
// least: a process's allowance A takes A/T units off a pace's burst B (each
// reservation counts from the latest time it may be sent, pace.lua), and
// while A > B×T every request pays T + A − B×T, so a fast limit with a burst
// of 9 (0.9ms at 10,000 per second) would send one request per allowance.
// 50ms is several times the largest allowance measured under load.
const defaultBurstSpan = 50 * time.Millisecond

// defaultPace returns the paced limit a rule keeps beside its window limits
// when it states no shape (SlidingLog, no paced limit, NoDefaultPace unset): at the
// rate of its slowest limit, which every upstream of those limits sustains,
// with a burst of defaultBurst, or of the sends of defaultBurstSpan when
// they are more (at most N). Evenly spaced sends are accepted by sliding
// logs, fixed windows, sliding counters, token buckets and GCRA alike; the
// window limits still hold every window to N. A limit of N <= defaultBurst+1
// takes a burst of N instead: its window alone holds a burst to N, which a
// bucket of N or more accepts, and the pace's extra unit leaves room for the
// allowance (each reservation's allowance takes A/T units off a pace's
// burst: pace.lua). A limit of 1 needs no pace: its window spaces it.
func defaultPace(r Rule) (Limit, bool) {
	if r.NoDefaultPace || r.Algorithm != SlidingLog {
		return Limit{}, false
	}
	var slow Limit
	for _, l := range r.Limits {
		if l.Paced {
			return Limit{}, false
		}
		// l's rate N/Per below slow's (floats: N x Per overflows int64)
		if slow.N == 0 || float64(l.N)*float64(slow.Per) < float64(slow.N)*float64(l.Per) {
			slow = l
		}
	}
	switch {
	case slow.N < 2:
		return Limit{}, false
	case slow.N <= defaultBurst+1:
		return Paced(slow.N, slow.Per, slow.N), true
	}
	span := math.Ceil(float64(defaultBurstSpan) * float64(slow.N) / float64(slow.Per))
	p := Paced(slow.N, slow.Per, int(min(float64(slow.N), max(defaultBurst, span))))
	p.SlowStart = p.Burst < p.N
	return p, true
}

// windows returns the rule's limits without its default pace.
func (r *rule) windows() []Limit {
	if r.auto < 0 {
		return r.eff
	}
	return r.eff[:r.auto:r.auto]
}

// shapePauseSpacings is how many spacings of the learned pace a 429 that
// moves a key to it, or slows it, pauses the key when the upstream stated no
// wait: the pace is the fix, and a strict-spacing upstream is ready again
// one spacing after its last refusal.
const shapePauseSpacings = 2

// shapeFor returns the paced limit a key of r moves to after a 429 despite
// compliance: no burst, at the spacing of the rule's paced limit if it has
// one, else of its shortest window (Margin included, as r.eff). Own says
// the rule keeps that pace already (a paced limit without a burst), so that
// a 429 under it slows it. False for a counting algorithm, which ignores a
// learned pace.
func (r *rule) shapeFor() (p Limit, own, ok bool) {
	if r.Algorithm != SlidingLog {
		return Limit{}, false, false
	}
	var w Limit
	for _, l := range r.eff {
		if l.Paced {
			return Paced(l.N, l.Per, 0), l.Burst == 0, true
		}
		if w.N == 0 || l.Per < w.Per || l.Per == w.Per && l.N < w.N {
			w = l
		}
	}
	return Paced(w.N, w.Per, 0), false, true
}

// shapeTTL is how long a learned pace holds unless a 429 renews it: as a
// learned limit, long enough not to relearn it every few seconds.
func shapeTTL(p Limit) time.Duration {
	return min(max(10*time.Minute, 2*p.Per), 24*time.Hour)
}

// reshape adds to l, learned from a 429 on a request that the throttle
// admitted (due: when its slot was due, zero if not measured; paced: the
// spacing of the learned pace it was reserved under, maybe another process's
// move or a pace the headers stated, zero if none), the move of skey to r's
// stricter shape. A 429 to a request sent under that pace (the upstream
// spaces strictly and the sends reached it closer than the pace's slack
// allows, or the upstream counts other clients' requests too) slows the
// pace, fleet-wide (slow): by the spread this transport measured of its
// sends, then by twice what was added. Each costs its request and
// a pause of a couple of spacings, not a window. A stated wait (Retry-After,
// a budget's reset, X-App-Usage) is kept whole, but for a Retry-After of
// one second to a request sent under the pace, which pauses two spacings
// too unless the upstream refused again within that second
// (refusedAgain): a strict-spacing upstream rounds its next slot, a
// spacing away, up to the header's whole second.
// It reports whether the 429 moves the key (a new pace, not a slowing).
func (f *feedbackState) reshape(r *rule, skey string, sig upstream.Said, due, now time.Time, paced time.Duration, l *contract.Learned) (move bool) {
	p, own, ok := r.shapeFor()
	if !ok || l.Pace.N > 0 {
		return false // a pace the headers state (a route bucket's) is the upstream's own word
	}
	n, counted := f.slowings(skey, due, now, shapeTTL(p))
	move = n == 0 && !own
	// A first 429 here under a pace another process set slows it too, and
	// is news to this process's waiters, placed before they heard of it.
	if n == 0 && (own || paced > 0) {
		n++ // already paced so (maybe by another process): slow it from the first 429
	}
	if n > 0 {
		p = f.slow(r, skey, p, paced, counted)
	} else {
		f.setBase(skey, p)
	}
	l.Pace, l.PaceTTL = contract.Limit(p), shapeTTL(p)
	spacing := (p.Per + time.Duration(p.N) - 1) / time.Duration(p.N)
	short := shapePauseSpacings * spacing
	switch {
	case !sig.Stated():
		l.Pause = min(l.Pause, short)
	case n > 0 && roundedWait(sig) && short < sig.RetryAfter && !f.refusedAgain(skey, due, now, sig.RetryAfter):
		l.Pause = min(l.Pause, short)
	}
	return move
}

// slowShare is the least a slowing adds to a pace's spacing, as a share of
// it (1/100: 1 %), and the most a pace's slowings add in all is its spacing
// (the rate halved): a path that varies by more than the spacing needs an
// upstream with a burst, or a rule of its own.
const slowShare = 100

// slow returns the pace that a 429 to a request reserved under a learned
// pace (paced: its spacing, zero if not known) moves skey to, r's shape
// being p: what held, slower by the spread of this transport's sends
// (pathSpread: from the slots to the answers, the largest less the least of
// its latest answers), at least 1 %, or by what the slowings had added to
// it when that is more, so that each further 429 doubles it, up to the pace
// halved. The sends of a fleet under a pace without a burst reach a strict
// upstream spaced by the pace, give or take how much their time from slot
// to upstream varies: a refusal says it varied by more than the pace's
// slack, and the spread measured says by how much (the allowance each slot
// pays covers the process's lateness, part of it, so this errs wider). The
// fleet's pace is the slowest any of its transports set, so it covers the
// largest spread measured by one that was refused. counted says this
// transport slowed the pace since its move and this 429 is to a request due
// after that: the pace it set held, when paced is not known.
//
// The pace slowed is the one that held, never the rule's faster one: the
// pace this transport slowed last, or, slower than any slowing reaches
// (twice p's spacing), one the upstream stated (a route bucket's). A probe
// (probe) brings the pace back towards it by halves.
func (f *feedbackState) slow(r *rule, skey string, p Limit, paced time.Duration, counted bool) Limit {
	n := time.Duration(p.N)
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.told[skey]
	held := max(p.Per, paced*n)
	if paced == 0 && counted {
		held = max(held, old.set)
	}
	base := p
	switch {
	case old.base.N > 0 && old.base.Per <= held:
		base = old.base
	case held > 2*p.Per:
		base.Per = held
	}
	step := base.Per / slowShare
	if ps := f.paths[r.Name]; ps != nil {
		step = max(step, ps.spread()*n)
	}
	added := held - base.Per
	added = min(added+max(step, added), base.Per)
	slowed := base
	slowed.Per += added
	old.level, old.base, old.set = 1, base, slowed.Per
	f.told[skey] = old
	return slowed
}

// roundedWait reports whether the only wait sig states is a Retry-After of
// one second: what a strict-spacing upstream (a GCRA or a token bucket
// without burst, nginx limit_req) sends for a next slot a spacing away, its
// wait rounded up to the header's whole second. A fractional wait is
// precise, and kept.
func roundedWait(sig upstream.Said) bool {
	return sig.HasRetryAfter && sig.RetryAfter == time.Second && !sig.Global &&
		sig.Exhausted() == 0 && !(sig.HasUsage && sig.Usage >= 100)
}

// refusedAgain reports whether a refusal at now that states a rounded wait
// of stated comes within the stated wait of the last refusal whose wait was
// shortened, to a request due after it (due zero: not known, so assumed
// after): the upstream is exhausted, not spacing strictly, and its wait is
// kept whole. Otherwise it remembers this refusal as shortened. So the key
// pauses for a couple of spacings at a strict-spacing upstream's refusal,
// and a real exhaustion costs at most one more refused request.
func (f *feedbackState) refusedAgain(skey string, due, now time.Time, stated time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.told == nil || len(f.told) >= maxTold {
		f.told = make(map[string]told)
	}
	old := f.told[skey]
	if !old.short.IsZero() && now.Before(old.short.Add(old.shortFor)) {
		// In flight before the last shortened refusal: the same burst.
		return due.IsZero() || due.After(old.short)
	}
	old.short, old.shortFor = now, stated
	f.told[skey] = old
	return false
}

// slowings returns how often this transport has slowed skey's learned pace
// since it moved the key to it (0 at the move), counting this 429: one to a
// request due after the last move or slowing (due zero: not known, so
// assumed after) slows it once more (counted); one to a request sent before
// (the same burst, or in flight) does not. A move lasts ttl: after it, what
// this transport slowed is forgotten.
func (f *feedbackState) slowings(skey string, due, now time.Time, ttl time.Duration) (n int, counted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.told == nil || len(f.told) >= maxTold {
		f.told = make(map[string]told)
	}
	old := f.told[skey]
	switch {
	case old.shaped.IsZero() || now.Sub(old.shaped) >= ttl:
		old.shaped, old.slowed = now, 0
		old.level, old.base, old.set = 0, Limit{}, 0
	case due.IsZero() || due.After(old.shaped):
		old.shaped, old.slowed = now, old.slowed+1
		counted = true
	}
	f.told[skey] = old
	return old.slowed, counted
}

// setBase remembers the pace skey moved to, which its slowings slow.
func (f *feedbackState) setBase(skey string, base Limit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.told[skey]
	old.base, old.set = base, base.Per
	f.told[skey] = old
}

// probeQuiet is how long a key's pace must go without a refusal heard by
// this transport before it probes the pace back towards the rule's rate
// (at least ten spacings): a probe halves what the slowings added, so a
// spacing refused every few seconds settles a slowing or two above the
// rate the upstream accepts, and one refused no more returns to the rule's.
const probeQuiet = 5 * time.Second

// probe returns the probe (contract.Learned.Probe) that skey's learned pace
// is due after a response that was no refusal (paced: the spacing of the
// learned pace its request was reserved under, zero if none), if this
// transport slowed that pace and heard no refusal of it (nor probed it) for
// the quiet time: towards the pace it slowed (the rule's own shape, or a
// slower one that held, as a route bucket's), never faster. The store
// halves what the slowings added, only if no process slowed it meanwhile,
// and drops the rest once within 1 %; the transport probes again after
// each quiet time until the pace its requests are reserved under is back.
func (f *feedbackState) probe(r *rule, skey string, paced time.Duration, now time.Time) (contract.Learned, bool) {
	p, _, ok := r.shapeFor()
	if !ok {
		return contract.Learned{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	old, seen := f.told[skey]
	if old.base.N > 0 {
		p = old.base
	}
	quiet := max(probeQuiet, 10*p.Per/time.Duration(p.N))
	since := now.Sub(old.shaped)
	if !seen || old.level == 0 || since < quiet || since >= shapeTTL(p) || now.Sub(old.probed) < quiet {
		return contract.Learned{}, false
	}
	if paced <= time.Duration(contract.Limit(p).Interval())*time.Microsecond {
		old.level = 0 // back at the pace it slowed (or none holds): done
		f.told[skey] = old
		return contract.Learned{}, false
	}
	old.set = p.Per + (old.set-p.Per)/2 // as the store will
	old.probed = now
	f.told[skey] = old
	return contract.Learned{Pace: contract.Limit(p), PaceTTL: shapeTTL(p), Probe: quiet}, true
}
