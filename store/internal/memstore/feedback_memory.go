package memstore

import (
	"context"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// memFeedback is what the upstream said about one key of a Memory store, as
// the fields of the hash of internal/script/feedback.lua; times in microseconds.
type memFeedback struct {
	pause       int64 // until
	n, w, until int64 // learned limit n per w, valid until
	budget      int64 // units left before reset, when reset > 0
	reset       int64
	pt, pb, pe  int64 // learned pace: spacing pt, burst pb, valid until pe
	pm          int64 // when the key last moved to a stricter pace
	ps          int64 // when the pace was last slowed, set or probed
	pp          int64 // when it was last probed (0: not since it was set)
	xm, xe      int64 // learned margin xm beyond the rule's, valid until xe
	xs          int64 // when the margin was last widened or probed
}

func (f *memFeedback) expires() int64 { return max(f.pause, f.until, f.reset, f.pe, f.xe) }

// Pause implements Feedback.
func (m *Memory) Pause(ctx context.Context, key string, d time.Duration) error {
	return m.Learn(ctx, key, contract.Learned{Pause: d})
}

// Learn implements Feedback, with the merges of feedback.lua.
func (m *Memory) Learn(ctx context.Context, key string, l contract.Learned) error {
	_, err := m.LearnEffect(ctx, key, l)
	return err
}

// LearnEffect implements Effector: Learn, and what it did to the key's
// learned margin and pace (feedback.lua's reply).
func (m *Memory) LearnEffect(ctx context.Context, key string, l contract.Learned) (contract.Effect, error) {
	var e contract.Effect
	if err := l.Validate(key); err != nil {
		return e, err
	}
	if err := ctx.Err(); err != nil {
		return e, err
	}
	if l.Empty() {
		return e, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.micros()
	if l.Probe > 0 || l.MarginProbe > 0 {
		f := m.liveFeedback(key, now)
		// A probe towards the configured rate (feedback.lua): halfway
		// from a pace that holds and was left alone for the quiet time.
		if f != nil && l.Probe > 0 && f.pe > now && f.pt > l.Pace.Interval() && now-f.ps >= contract.Micros(l.Probe) {
			pt := l.Pace.Interval()
			f.pt, f.ps, f.pp = pt+(f.pt-pt)/2, now, now
			if 100*(f.pt-pt) <= pt { // within the least slowing (1 %): there
				f.pt = pt
			}
			e.Hurried, e.Spacing = true, contract.FromMicros(f.pt)
		}
		// A probe of the margin: halved when left alone for the quiet time.
		if f != nil && l.MarginProbe > 0 && f.margin(now) > 0 && now-f.xs >= contract.Micros(l.MarginProbe) {
			f.xm, f.xs = f.xm/2, now
			if f.xm < 1000 {
				f.xm = 0
			}
			e.Narrowed = true
			if f.xm > 0 {
				e.Margin, e.MarginFor = contract.FromMicros(f.xm), contract.FromMicros(f.xe-now)
			}
		}
		return e, nil
	}
	if m.feedback == nil {
		m.feedback = make(map[string]*memFeedback)
	}
	f := m.feedback[key]
	if f == nil || f.expires() <= now {
		f = &memFeedback{}
		m.feedback[key] = f
	}
	if l.Pause > 0 {
		f.pause = max(f.pause, now+contract.Micros(l.Pause))
	}
	if l.Limit.N > 0 && l.LimitTTL > 0 {
		f.n, f.w, f.until = int64(l.Limit.N), contract.Micros(l.Limit.Per), now+contract.Micros(l.LimitTTL)
	}
	if l.Pace.N > 0 {
		pt, pb := l.Pace.Interval(), int64(l.Pace.Burst)
		moved := f.pe <= now
		if !moved { // a pace that holds is slowed, never hurried
			pt, pb = max(pt, f.pt), min(pb, f.pb)
			moved = pb < f.pb
		}
		if f.pe <= now {
			f.pp = 0 // a new pace: not probed yet
		}
		if moved {
			f.pm = now
		}
		f.pt, f.pb, f.pe, f.ps = pt, pb, now+contract.Micros(l.PaceTTL), now
	}
	if l.Margin > 0 {
		xm, w := f.margin(now), contract.Micros(l.Margin)
		m := max(xm, w)
		if xm > 0 && now-contract.Micros(l.MarginAge) >= f.xs { // placed under xm: doubled
			m = 2*xm + w
		}
		m = min(m, contract.Micros(l.MarginCap))
		if m != xm {
			f.xm, f.xs = m, now
		}
		f.xe = now + contract.Micros(l.MarginTTL)
		e.Margin, e.MarginFor = contract.FromMicros(f.xm), contract.FromMicros(f.xe-now)
	}
	if l.Reset > 0 {
		at := now + contract.Micros(l.Reset)
		rem := int64(l.Remaining)
		switch {
		case f.reset > now && abs(at-f.reset) <= contract.Micros(contract.ResetSlack):
			f.budget = min(f.budget, rem)
			f.reset = max(f.reset, at)
		case at > f.reset:
			f.budget, f.reset = rem, at
		}
	}
	return e, nil
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// liveFeedback returns key's feedback, nil when there is none or it has
// expired (then it is dropped); m.mu is held.
func (m *Memory) liveFeedback(key string, now int64) *memFeedback {
	if len(m.feedback) == 0 {
		return nil // most keys: no map lookup
	}
	f := m.feedback[key]
	if f != nil && f.expires() <= now {
		delete(m.feedback, key)
		return nil
	}
	return f
}

// memHold is what a pause or a budget does to a reservation of cost at now.
type memHold struct {
	until       int64 // the slot is held back to until, when after now
	refuse      bool  // until is further than the server wait: refused at once
	budgetReset int64 // when > 0, a slot before it spends the budget
}

// hold is the rule of internal/script/hold.lua, for the log and the counting algorithms
// alike: a pause, or a budget too short for the cost, holds the slot back to
// its end, refused at once past serverWait; a budget that covers the cost is
// spent by a slot before its reset.
func (f *memFeedback) hold(now, cost, serverWait int64) memHold {
	h := memHold{until: f.pause}
	if f.reset > now {
		if f.budget < cost {
			h.until = max(h.until, f.reset)
		} else {
			h.budgetReset = f.reset
		}
	}
	h.refuse = h.until-now > serverWait
	return h
}

// learned returns the learned limit of n per w µs, if one holds at now and
// its window is at most maxW, or its n at most maxN (log.lua's rule: the log
// then keeps its window; the counting algorithms pass 0).
func (f *memFeedback) learned(now, maxW, maxN int64) (n, w int64, ok bool) {
	if f.until > now && (f.w <= maxW || f.n <= maxN) {
		return f.n, f.w, true
	}
	return 0, 0, false
}

// pace returns the learned pace's spacing and burst, if one holds at now.
func (f *memFeedback) pace(now int64) (t, burst int64, ok bool) {
	if f.pe > now {
		return f.pt, f.pb, true
	}
	return 0, 0, false
}

// margin returns the learned margin (µs beyond the rule's), if one holds
// at now, else 0.
func (f *memFeedback) margin(now int64) int64 {
	if f.xe > now {
		return f.xm
	}
	return 0
}
