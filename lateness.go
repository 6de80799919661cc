package throttle

import (
	"sync"
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
// call to the shared store before it is no lateness.)
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
type lateness struct {
	mu    sync.Mutex
	start time.Time     // the current period's start; zero before any sample
	cur   time.Duration // the largest sample of the current period
	prev  time.Duration // the largest sample of the last earlier period that had one
	seen  bool          // the current period has a sample
}

// latenessPeriod is how long a sample counts for sure: while requests come,
// between one and two periods.
const latenessPeriod = time.Second

// maxAllowance bounds the allowance (like maxMargin bounds the Margin).
const maxAllowance = time.Minute

// minAllowance is the least allowance a SlidingLog reservation carries: with
// none, the store would hold the slot back to the log's last entry, which
// other processes' allowances put in the future (see store.Request).
const minAllowance = time.Microsecond

// allowance returns the allowance for a reservation made at now.
func (l *lateness) allowance(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rotate(now)
	return min(max(l.cur, l.prev, minAllowance), maxAllowance)
}

// observe records the lateness late of a request sent at now, which was
// reserved with allowance a.
func (l *lateness) observe(now time.Time, late, a time.Duration) {
	late = min(late, 4*(a+DefaultMargin))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rotate(now)
	l.cur, l.seen = max(l.cur, late), true
}

// rotate starts a new period when the current one is over; l.mu is held.
func (l *lateness) rotate(now time.Time) {
	switch {
	case l.start.IsZero():
		l.start = now
	case now.Sub(l.start) >= latenessPeriod:
		if l.seen {
			l.prev = l.cur
		}
		l.start, l.cur, l.seen = now, 0, false
	}
}
