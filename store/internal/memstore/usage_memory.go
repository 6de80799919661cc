package memstore

import (
	"context"
	"sort"

	"github.com/throttle-go/throttle/internal/contract"
)

// logUsage is Usage of the log, as usage.lua: Reserve's slot (logCall),
// for a cost of 1, without the order of the log and without recording,
// trimming or making any state; m.mu is held.
func (m *Memory) logUsage(u *contract.Usage, key string, req contract.Request, now, maxW int64, paced bool, f *memFeedback) {
	c := logCall{m: m, req: req, key: key, now: now, maxW: maxW, windows: !paced || maxW > 0, peek: true}
	c.lg = &noLog
	if l := m.logs[key]; c.windows && l != nil && l.expires > now {
		c.lg = l
	}
	c.s = slot{at: now}
	if paced {
		c.ownPace()
	}
	live := c.lg.live()
	after := func(t int64) int {
		return len(live) - sort.Search(len(live), func(i int) bool { return live[i] > t })
	}
	future := after(now)
	for _, l := range req.Limits {
		if l.Paced {
			u.Limits = append(u.Limits, contract.PaceUsage(l, c.tat, now))
		} else {
			u.Limits = append(u.Limits, contract.LimitUsage{Limit: l, Used: after(now-contract.Micros(l.Per)) - future, Reserved: future})
		}
	}
	u.Entries = len(live)
	if len(live) > 0 {
		u.Last = contract.FromMicros(c.lg.last() - now)
	}
	c.lg.slot(&c.s, req.Limits, 1, 0)
	if f != nil {
		c.xm = f.margin(now) // the windows a learned margin widens, as reserve

		c.feedback(f, &contract.Reservation{}) // never refuses: the wait is beyond any pause
	}
	c.slowStart()
	u.Next, u.NextCause, u.NextLimit = contract.FromMicros(c.s.at-now), c.s.cause, c.s.limit
}

// Usage implements Inspector, with the rules of usage.lua. It changes
// nothing, not even an expired key (which reads as empty).
func (m *Memory) Usage(ctx context.Context, key string, req contract.Request) (contract.Usage, error) {
	req, err := contract.UsageRequest(key, req)
	if err != nil {
		return contract.Usage{}, err
	}
	if err := ctx.Err(); err != nil {
		return contract.Usage{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.micros()
	u := contract.Usage{Algorithm: req.Algorithm}
	var f *memFeedback
	if g := m.feedback[key]; g != nil && g.expires() > now {
		f = g
		if f.pause > now {
			u.Pause = contract.FromMicros(f.pause - now)
		}
		if f.until > now {
			u.Learned, u.LearnedFor = contract.Limit{N: int(f.n), Per: contract.FromMicros(f.w)}, contract.FromMicros(f.until-now)
		}
		if f.reset > now {
			u.Budget, u.BudgetReset = int(f.budget), contract.FromMicros(f.reset-now)
		}
		if f.pe > now {
			u.LearnedPace, u.LearnedPaceFor = contract.LearnedPace(f.pt, f.pb), contract.FromMicros(f.pe-now)
			u.LearnedPaceChanged = contract.FromMicros(now - f.ps)
			if f.pp > 0 {
				u.LearnedPaceProbed, u.PaceProbed = contract.FromMicros(now-f.pp), true
			}
		}
		if xm := f.margin(now); xm > 0 {
			u.LearnedMargin, u.LearnedMarginFor = contract.FromMicros(xm), contract.FromMicros(f.xe-now)
			u.LearnedMarginChanged = contract.FromMicros(now - f.xs)
		}
	}
	maxW, paced := int64(0), false
	for _, l := range req.Limits {
		if l.Paced {
			paced = true
		} else {
			maxW = max(maxW, window(req.Algorithm, l))
		}
	}
	if req.Algorithm == contract.SlidingLog {
		m.logUsage(&u, key, req, now, maxW, paced, f)
	} else {
		m.countsUsage(&u, key, req, now, maxW, f)
	}
	return u, nil
}

// countsUsage is Usage of a counting algorithm: reserveCounts' search, on a
// copy of the limits, recording nothing; m.mu is held.
func (m *Memory) countsUsage(u *contract.Usage, key string, req contract.Request, now, maxW int64, f *memFeedback) {
	limits := append([]contract.Limit(nil), req.Limits...)
	start, cause := now, contract.CauseNone
	var tightened []bool
	if f != nil {
		h := f.hold(now, 1, contract.UsageServerWait)
		if h.until > now {
			start, cause = h.until, contract.CauseUpstream
		}
		if ln, lw, ok := f.learned(now, maxW, 0); ok {
			tightened = make([]bool, len(limits))
			for i, l := range limits {
				n := max(int(float64(ln)*float64(window(req.Algorithm, l))/float64(lw)), 1)
				if n < l.N {
					limits[i].N, tightened[i] = n, true
				}
			}
		}
	}
	c := make([]counts, len(limits))
	if st := m.counters[counterKey{req.Algorithm, key}]; st != nil && st.expires > now {
		for i := range c {
			if i < len(st.c) {
				c[i] = st.c[i]
			}
		}
	}
	for i := range c {
		if c[i] == nil {
			c[i] = counts{}
		}
	}
	// earliest only reads c: a missing index reads as 0 and adds nothing.
	t, limit, capped := earliest(req.Algorithm, limits, c, start, 1)
	switch {
	case limit >= 0 && tightened != nil && tightened[limit]:
		cause = contract.CauseLearned
	case limit >= 0:
		u.NextLimit, cause = limit, contract.CauseLimit
	}
	u.Next, u.NextCause, u.Capped = contract.FromMicros(t-now), cause, capped
	for i, l := range req.Limits {
		k := floorDiv(now, contract.Span(req.Algorithm, l))
		b := int64(1)
		if req.Algorithm == contract.Buckets {
			b = l.Buckets()
		}
		lu := contract.LimitUsage{Limit: l}
		for j, v := range c[i] {
			switch {
			case j > k:
				lu.Reserved += int(v)
			case j > k-b:
				lu.Used += int(v)
			}
		}
		if req.Algorithm == contract.SlidingCounter {
			lu.Previous = int(c[i][k-1])
		}
		u.Limits = append(u.Limits, lu)
	}
}
