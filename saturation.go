package throttle

import (
	"slices"
	"sync"
	"time"
)

// This file is how close a rule runs to its limits, as the process can tell
// from its own decisions, without a store call: the units it sent in the
// last window of each limit, and the mean wait of its recent sends
// (RuleStats.Recent). Each is counted in tenths of its window, so that it
// covers the last window to within a tenth, never more than the window.

// recentWaitWindow is the window of RuleStats.Recent.Wait.
const recentWaitWindow = 10 * time.Second

// recent is the windows of one rule name. A short lock per decision.
type recent struct {
	mu     sync.Mutex
	now    func() time.Time // the engine's clock, from the first decision
	limits []Limit          // the rule's, without the default pace
	used   []window         // per limit: units sent
	wait   window           // waits' sum (ns) and count
}

// window counts in tenths of per: the tenth of now (idx) and the nine
// before it, a ring. Their sum is a count over the last per, to within a
// tenth: an interval from 0.9 per to per long that ends now. So it never
// counts more than the window holds: a rule that keeps its limit reads at
// most 1.
type window struct {
	per   time.Duration
	idx   int64 // the tenth of per holding now, since the epoch
	tenth [tenths][2]float64
}

// newRecent returns the windows of r's limits.
func newRecent(r *rule) *recent {
	c := &recent{wait: window{per: recentWaitWindow}}
	for i, l := range r.Limits {
		if i != r.auto { // the default pace is a shape, not a limit the rule was given
			c.limits = append(c.limits, l)
			c.used = append(c.used, window{per: l.Per})
		}
	}
	return c
}

// tenths is the number of parts of a window.
const tenths = 10

// roll moves w to the tenth of now, emptying the tenths it passes; a clock
// that steps back stays in the current one.
func (w *window) roll(now time.Time) {
	i := now.UnixNano() / max(int64(w.per/tenths), 1)
	if i <= w.idx {
		return
	}
	for j := w.idx + 1; j <= i && j <= w.idx+tenths; j++ {
		w.tenth[j%tenths] = [2]float64{}
	}
	w.idx = i
}

// add adds a and b to the tenth of now.
func (w *window) add(now time.Time, a, b float64) {
	w.roll(now)
	t := &w.tenth[w.idx%tenths]
	t[0] += a
	t[1] += b
}

// sum is w's counts over the last window ending at now.
func (w *window) sum(now time.Time) (s [2]float64) {
	w.roll(now)
	for _, t := range w.tenth {
		s[0] += t[0]
		s[1] += t[1]
	}
	return s
}

// note counts d, a decision of the rule, when it sent (or would have sent,
// for a shadow rule) its units.
func (c *recent) note(now func() time.Time, d Decision) {
	if c == nil || d.Outcome != Sent {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
	t := now()
	for i := range c.used {
		c.used[i].add(t, float64(d.Cost), 0)
	}
	c.wait.add(t, float64(d.Delay), 1)
}

// read fills s.Recent.
func (c *recent) read(s *RuleStats) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.Recent.Limits = slices.Clone(c.limits)
	s.Recent.Used = make([]float64, len(c.limits))
	if c.now == nil {
		return // nothing sent yet
	}
	t := c.now()
	for i := range c.used {
		s.Recent.Used[i] = c.used[i].sum(t)[0] / float64(c.limits[i].N)
	}
	if w := c.wait.sum(t); w[1] > 0 {
		s.Recent.Wait = time.Duration(w[0] / w[1])
	}
}
