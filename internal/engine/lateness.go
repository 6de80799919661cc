package engine

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// lateness measures how late this process sends after its slots, so that each
// reservation carries an allowance that covers it (contract.Request.Allowance):
// the log records a request at the latest time it may be sent, and the next
// window's reservations count it there. A process that sends late (a loaded
// machine, a race-instrumented build, a slow link to Redis) thus pays for its
// lateness in rate instead of in 429s, and a prompt process keeps its
// allowance small. (The log stays ordered, so an entry recorded soon after a
// much slower process's is recorded no earlier than it: in a fleet where one
// process is far slower than the rest, the rest pay part of its allowance.)
// The Margin covers what no process can measure: the network and the
// upstream.
//
// A request's lateness is measured when it woke (or got its slot at once),
// and again when the base transport had the connection to write it on
// (httptrace's GotConn: a dial, a TLS handshake, a full pool), from the
// earliest its slot may be on this process's clock: an upper bound, for the
// store's clock is known only to within the fastest recent round trip
// (clock.go). Of it, the part from the latest the slot may be, as the
// bounds stand then, is this process's own (admission.own), and only that
// is learned here: a reservation adds the clocks' width as it is then
// (storeClock.spread), and a slow reply from the store, which left the
// bounds wide, is no lateness of the process's sends. (Without the store's
// clock, the whole round trip of the call is in the sample; a decision of
// the in-process limiter under FailLocal is measured from its reply: the
// failed call to the shared store before it is no lateness.)
//
// A request that gets its connection later than its allowance plus the
// rule's retake takes a new slot before it is written (Engine.Wired), as one that
// wakes too late does: no request goes on the wire later than that after the
// slot it is recorded at, whatever a dial or a full pool cost it. So a
// Transport (guarded: its wire is watched) needs no guess at its first dial:
// a process that has measured nothing reserves with half the rule's margin,
// and its first sample, at a wake-up or on the wire, ends that. A Limiter,
// whose caller sends after Wait returns, cannot be watched on the wire, nor
// can a Transport whose base answered a request without reporting its
// connection (not net/http underneath): it stops being guarded. Unguarded,
// a process that has measured nothing on the wire yet reserves with
// initialAllowance, for its first requests are the likeliest to dial, and
// the first measurement on the wire, or the end of the first period, ends it.
//
// The allowance covers all but the latest tailShare-th of the samples of the
// current period, the last earlier one that had any, and as many earlier
// ones with samples as it takes to hold tailShare (up to latenessPeriods in
// all; the largest of them while they hold fewer: a process that sends
// rarely keeps what it learned; with a fresh start at each request, a late
// one would retake its slot and still send late). A request later than its
// allowance plus its rule's retake takes a new slot (admit.go), so the rare
// request of the tail costs a retake rather than a 429, and a single stall
// (a paused VM, a slow round trip) does not set every slot of the next two
// periods: under a pace without a burst each slot pays the allowance. A
// sample enters capped at 4 × (allowance + DefaultMargin), so that one stall
// does not hold every reservation back for long while fewer samples come,
// while lateness that lasts raises the allowance at least fourfold per
// sample until it is covered.
//
// Reading it costs two atomic loads, a sample one atomic add: the lock is
// taken only by a sample among the period's tailKeep largest so far, every
// tailShare-th sample, or when a period ends. (A sample that races with the
// end of a period may be lost: there are many, and each request is covered
// by its retake anyway.)
type lateness struct {
	mu    sync.Mutex
	start time.Time                 // the current period's start; zero before any sample
	cur   tail                      // the current period's largest samples
	past  [latenessPeriods - 1]tail // those of the last earlier periods that had any, newest first
	// prior is initialAllowance while nothing was measured on the wire
	// (from the slot to the connection the request is written on), in the
	// first period; zero after.
	prior    time.Duration
	hasPrior atomic.Bool // prior > 0, for observe's lock-free path
	// guarded: every request is measured on the wire and retaken there
	// when late (a Transport, until its base answers a request without
	// reporting the connection).
	guarded atomic.Bool

	n     atomic.Int64 // the samples of the current period
	floor atomic.Int64 // the least of cur's samples once it keeps tailKeep (ns), else 0; written under mu
	value atomic.Int64 // the allowance, as of the last change (ns); written under mu
	ends  atomic.Int64 // when the current period ends (UnixNano); 0 before any sample
}

// tailShare: the allowance leaves out the latest 1 in tailShare samples.
// Each left out costs a retake (two calls to the store) when it recurs, so
// that a process pays about 2/tailShare calls per request for it.
const tailShare = 200

// tailKeep is how many of a period's largest samples are kept: the allowance
// leaves out at most tailKeep−1 samples.
const tailKeep = 8

// latenessPeriods is how many periods with samples the allowance looks back
// over while the newer ones hold fewer than tailShare samples: a process
// that sends a few requests a second keeps enough to leave out its rare
// latest one, which otherwise each new largest sample would retake.
const latenessPeriods = 8

// tail is one period's sample count and largest samples, largest first.
type tail struct {
	n   int64
	top []time.Duration // at most tailKeep
}

// add keeps d if it is among t's tailKeep largest.
func (t *tail) add(d time.Duration) {
	i, _ := slices.BinarySearchFunc(t.top, d, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	if i >= tailKeep {
		return
	}
	if len(t.top) == tailKeep {
		t.top = t.top[:tailKeep-1]
	}
	t.top = slices.Insert(t.top, i, d)
}

// latenessPeriod is how long a sample counts for sure: while requests come,
// between one and two periods.
const latenessPeriod = time.Second

// maxAllowance bounds the allowance (like maxMargin bounds the Margin).
const maxAllowance = time.Minute

// initialAllowance is the allowance of a process that has measured nothing
// yet and whose wire is not guarded: its first requests may dial a
// connection (and shake hands over TLS) after their slots, which no wake-up
// measures. It ends with the first measurement on the wire, or after the
// first period.
const initialAllowance = 100 * time.Millisecond

// allowance returns the allowance for a reservation made at now; cold is
// that of a guarded process that has measured nothing yet.
func (l *lateness) allowance(now time.Time, cold time.Duration) time.Duration {
	e := l.ends.Load()
	if e == 0 { // nothing measured yet
		if l.guarded.Load() {
			return cold
		}
		return initialAllowance
	}
	if now.UnixNano() < e {
		return time.Duration(l.value.Load())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rotate(now, 0)
	return time.Duration(l.value.Load())
}

// observe records the lateness late of a request at now, which was reserved
// with allowance a: at its wake-up, or on the wire (wire: when the connection
// it is written on was obtained), which ends the initial allowance.
func (l *lateness) observe(now time.Time, late, a time.Duration, wire bool) {
	late = min(late, 4*(a+DefaultMargin))
	n := l.n.Add(1)
	if f := l.floor.Load(); f > 0 && int64(late) <= f && n%tailShare != 0 && now.UnixNano() < l.ends.Load() && !(wire && l.hasPrior.Load()) {
		return // not among this period's largest: nothing changes
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rotate(now, 1) // this sample, counted, is the new period's
	if wire {
		l.prior = 0
		l.hasPrior.Store(false)
	}
	l.cur.add(late)
	l.publish()
}

// rotate starts a new period when the current one is over, with the last
// pending samples counted; l.mu is held.
func (l *lateness) rotate(now time.Time, pending int64) {
	switch {
	case l.start.IsZero() && l.guarded.Load():
		l.start = now // the first sample, of any kind, ends the cold start
	case l.start.IsZero():
		l.start, l.prior = now, initialAllowance
		l.hasPrior.Store(true)
	case now.Sub(l.start) >= latenessPeriod:
		if len(l.cur.top) > 0 {
			l.cur.n = l.n.Load() - pending
			last := l.past[len(l.past)-1].top[:0]
			copy(l.past[1:], l.past[:len(l.past)-1])
			l.past[0], l.cur = l.cur, tail{top: last}
		}
		l.start, l.prior = now, 0
		l.hasPrior.Store(false)
		l.n.Store(pending)
	default:
		return
	}
	l.publish()
}

// publish updates what allowance and observe read; l.mu is held.
func (l *lateness) publish() {
	var top [latenessPeriods * tailKeep]time.Duration
	all, n := append(top[:0], l.cur.top...), l.n.Load()
	for i, p := range l.past {
		if i > 0 && n >= tailShare {
			break
		}
		all, n = append(all, p.top...), n+p.n
	}
	slices.SortFunc(all, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	v := l.prior
	if len(all) > 0 {
		v = max(v, all[min(n/tailShare, tailKeep-1, int64(len(all)-1))])
	}
	l.value.Store(int64(min(v, maxAllowance)))
	l.ends.Store(l.start.Add(latenessPeriod).UnixNano())
	l.floor.Store(0)
	if len(l.cur.top) == tailKeep {
		l.floor.Store(int64(l.cur.top[tailKeep-1]))
	}
}

// wired checks a's lateness when its request got its connection. When it is
// later than its allowance plus the rule's retake, and the wire is guarded,
// a takes a new slot before the request is written; settle (admit.go) sends
// it on the old one if none comes.
func (c *Engine) wired(ctx context.Context, a *Admission) state {
	now := c.Now()
	c.clock.replace(a, now)
	a.due = a.slot
	late := now.Sub(a.due)
	c.late.observe(now, a.own(now, late), a.Verdict.Allowance, true)
	if !c.late.guarded.Load() || late <= a.Verdict.Allowance+a.retake() || a.Verdict.Retaken-a.stale >= MaxRetakes {
		return decided
	}
	prev := *a
	prev.next = decided
	a.onWire = &prev
	a.lease.held, a.Verdict.Lease = a.Verdict.Lease, nil // the retake renews the lease held
	a.Verdict.Retaken++
	return taking
}
