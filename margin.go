package throttle

import (
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/internal/upstream"
)

// This file is the transport's answer to a refusal at a window edge
// (docs/feedback.md, "A 429 at a window's edge widens the margin"): a 429 to a request whose
// slot one of the rule's window limits placed, the pace it keeps having
// allowed it earlier. The log kept the window, so the upstream saw the
// request closer to the one N units before it than the fleet sent them: the
// time from the wire to the upstream varied by more than the margin. The
// key's windows widen, fleet-wide, through the store's feedback
// (contract.Learned.Margin), rather than moving the key to a stricter pace,
// which would pay for a path's spread on every slot instead of once per
// window.

// marginShare bounds the learned margin: at most a tenth of the rule's
// shortest window (and at least twice the rule's margin), so that it costs
// at most about a tenth of the rate. A path that varies by more needs a rule
// of its own.
const marginShare = 10

// maxMarginProbes is how many probes a transport sends after it widened a
// key's margin, one per quiet time: each halves what was learned, so that
// eight bring a margin of the cap back to the rule's.
const maxMarginProbes = 8

// marginQuiet is how long a key must go without a refusal heard by this
// transport before it probes the margin down (at least ten of the rule's
// shortest windows): a refusal at a window edge pauses the whole fleet for
// the upstream's wait, often a second, so the probe is rarer than a pace's.
const marginQuiet = 30 * time.Second

// pathSamples is how many of its latest answers a rule's path spread is
// measured over (about ten seconds at 100 per second).
const pathSamples = 1024

// pathSpread is what a transport measured of one rule's path: for each
// answer to a request sent on a slot, the time from the slot to the answer.
// Its spread (the largest less the least) bounds how much the time from the
// slot to the upstream varied, when the upstream's answer and its way back
// vary less: it is the margin the windows need, measured, and includes the
// process's lateness, which only errs wider.
type pathSpread struct {
	d    [pathSamples]time.Duration
	n, i int
}

func (p *pathSpread) add(d time.Duration) {
	p.d[p.i] = d
	p.i = (p.i + 1) % pathSamples
	p.n = min(p.n+1, pathSamples)
}

func (p *pathSpread) spread() time.Duration {
	if p.n == 0 {
		return 0
	}
	lo, hi := p.d[0], p.d[0]
	for _, d := range p.d[:p.n] {
		lo, hi = min(lo, d), max(hi, d)
	}
	return hi - lo
}

// learnsMargin reports whether r widens its margin at a window edge: a
// sliding log with a margin and a pace, its own or the default one.
func (r *rule) learnsMargin() bool {
	if r.Algorithm != SlidingLog || r.Margin <= 0 {
		return false
	}
	for _, l := range r.eff {
		if l.Paced {
			return true
		}
	}
	return false
}

// measure records an answer at now to a request of r whose slot was due
// (zero: not measured).
func (f *feedbackState) measure(r *rule, due, now time.Time) {
	if due.IsZero() || !r.learnsMargin() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paths == nil {
		f.paths = make(map[string]*pathSpread)
	}
	p := f.paths[r.Name]
	if p == nil {
		p = new(pathSpread)
		f.paths[r.Name] = p
	}
	p.add(now.Sub(due))
}

// atEdge reports whether v's slot was placed by one of r's window limits
// while r keeps a pace (its own or the default one) that would have let it
// go earlier: a refusal of it says the path's spread, not the shape of the
// sends.
func (r *rule) atEdge(v *engine.Verdict) bool {
	return v.HasLimit && v.LimitPart == 0 && v.LimitIdx < len(r.eff) && !r.eff[v.LimitIdx].Paced && r.learnsMargin()
}

// windowSpan returns r's shortest and longest window limits' windows
// (Margin included).
func (r *rule) windowSpan() (shortest, longest time.Duration) {
	for _, l := range r.eff {
		if l.Paced {
			continue
		}
		if shortest == 0 || l.Per < shortest {
			shortest = l.Per
		}
		longest = max(longest, l.Per)
	}
	return shortest, longest
}

// widen adds to l, learned from a refusal of a request of r at a window edge
// (due: when its slot was due on this clock, zero if not measured), the
// widening of skey's margin, up to marginShare of the window. A refusal
// proves that the path varies by more than the margin in force, not by how
// much; what this transport measured of the path (pathSpread) says how
// much. So the margin becomes the larger of the spread measured and twice
// the rule's margin, and the store doubles the whole margin when the
// refused slot was placed under the margin learned last: a spread S beyond
// what was measured is found in log2(S/Margin) refusals, at less than twice
// the rate S costs. The key's pace is left as it is; a wait the upstream
// stated is kept whole.
func (f *feedbackState) widen(r *rule, skey string, due, now time.Time, l *contract.Learned) {
	shortest, longest := r.windowSpan()
	bound := max(2*r.Margin, min(shortest/marginShare, maxMargin))
	age := time.Duration(0)
	if !due.IsZero() && now.After(due) {
		age = now.Sub(due)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := r.Margin
	if p := f.paths[r.Name]; p != nil {
		w = max(w, p.spread()-r.Margin)
	}
	l.Margin, l.MarginCap, l.MarginAge = min(w, bound-r.Margin), bound-r.Margin, age
	l.MarginTTL = upstream.HeldFor(longest)
	if f.told == nil || len(f.told) >= maxTold {
		f.told = make(map[string]told)
	}
	old := f.told[skey]
	old.widened, old.marginProbes = now, maxMarginProbes
	f.told[skey] = old
}

// marginProbe returns the probe of skey's learned margin
// (contract.Learned.MarginProbe) due after a response that was no refusal,
// if this transport widened that margin and neither widened it again nor
// probed it for the quiet time, and has probes left: the store halves the margin only if no
// process widened it meanwhile.
func (f *feedbackState) marginProbe(r *rule, skey string, now time.Time) (contract.Learned, bool) {
	shortest, _ := r.windowSpan()
	quiet := max(marginQuiet, 10*shortest)
	f.mu.Lock()
	defer f.mu.Unlock()
	old, seen := f.told[skey]
	if !seen || old.marginProbes == 0 || now.Sub(old.widened) < quiet || now.Sub(old.marginProbed) < quiet {
		return contract.Learned{}, false
	}
	old.marginProbes--
	old.marginProbed = now
	f.told[skey] = old
	return contract.Learned{MarginProbe: quiet}, true
}
