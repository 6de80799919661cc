package throttle

import (
	"sync"
	"sync/atomic"
	"time"
)

// lateness measures how late this process sends after its slots, so that each
// reservation carries an allowance that covers it (store.Request.Allowance):
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
// A request's lateness is measured from before its Reserve call: the time it
// woke (or got its slot at once) minus the time it asked, minus the delay the
// store gave. The store read its clock between the ask and the reply, so the
// slot is at least the ask plus the delay: the figure is an upper bound,
// which includes the round trip to the store. (A decision of the in-process
// limiter under FailLocal is measured from its reply instead: the failed
// call to the shared store before it is no lateness.) While the allowance
// is zero, a refusal's round trip is a sample too, the least lateness a
// request sent then would have had:
// before its first sample a process reserves with no allowance, and the
// store then holds its slot back to the log's last entry, which other
// processes' allowances put in the future (see store.Request); a FailFast
// process refused for that would otherwise never get a first sample.
//
// The allowance is the largest lateness of the current period and of the
// last earlier one that had any request: a process that sends rarely keeps
// what it learned (with a fresh start at each request, a late one would
// retake its slot and still send late). A request later than its allowance
// plus half the Margin retakes its slot (transport.go), so no single request
// relies on the estimate; and a sample enters it capped at
// 4 × (allowance + DefaultMargin), so that one stall (a paused VM) does not
// hold every reservation back for long, while lateness that lasts raises the
// allowance at least fourfold per sample until it is covered.
//
// Reading it costs two atomic loads: the lock is taken only by a sample
// above the period's largest so far, or when a period ends. (A sample that
// races with the end of a period may be lost: there are many, and each
// request is covered by its retake anyway.)
type lateness struct {
	mu    sync.Mutex
	start time.Time     // the current period's start; zero before any sample
	prev  time.Duration // the largest sample of the last earlier period that had one
	seen  bool          // the current period has a sample

	cur   atomic.Int64 // the largest sample of the current period (ns); written under mu
	value atomic.Int64 // the allowance, as of the last change (ns); written under mu
	ends  atomic.Int64 // when the current period ends (UnixNano); 0 before any sample
}

// latenessPeriod is how long a sample counts for sure: while requests come,
// between one and two periods.
const latenessPeriod = time.Second

// maxAllowance bounds the allowance (like maxMargin bounds the Margin).
const maxAllowance = time.Minute

// allowance returns the allowance for a reservation made at now.
func (l *lateness) allowance(now time.Time) time.Duration {
	if e := l.ends.Load(); e == 0 || now.UnixNano() < e {
		return time.Duration(l.value.Load())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rotate(now)
	return time.Duration(l.value.Load())
}

// observe records the lateness late of a request sent at now, which was
// reserved with allowance a.
func (l *lateness) observe(now time.Time, late, a time.Duration) {
	late = min(late, 4*(a+DefaultMargin))
	if c := l.cur.Load(); c > 0 && int64(late) <= c && now.UnixNano() < l.ends.Load() {
		return // not above this period's largest: nothing changes
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rotate(now)
	l.seen = true
	if int64(late) > l.cur.Load() {
		l.cur.Store(int64(late))
	}
	l.publish()
}

// rotate starts a new period when the current one is over; l.mu is held.
func (l *lateness) rotate(now time.Time) {
	switch {
	case l.start.IsZero():
		l.start = now
	case now.Sub(l.start) >= latenessPeriod:
		if l.seen {
			l.prev = time.Duration(l.cur.Load())
		}
		l.start, l.seen = now, false
		l.cur.Store(0)
	default:
		return
	}
	l.publish()
}

// publish updates what allowance reads; l.mu is held.
func (l *lateness) publish() {
	l.value.Store(int64(min(max(time.Duration(l.cur.Load()), l.prev), maxAllowance)))
	l.ends.Store(l.start.Add(latenessPeriod).UnixNano())
}
