package store

import (
	"context"
	"time"
)

// memFeedback is what the upstream said about one key of a Memory store, as
// the fields of the hash of feedback.lua; times in microseconds.
type memFeedback struct {
	pause       int64 // until
	n, w, until int64 // learned limit n per w, valid until
	budget      int64 // units left before reset, when reset > 0
	reset       int64
}

func (f *memFeedback) expires() int64 { return max(f.pause, f.until, f.reset) }

// Pause implements Feedback.
func (m *Memory) Pause(ctx context.Context, key string, d time.Duration) error {
	return m.Learn(ctx, key, Learned{Pause: d})
}

// Learn implements Feedback, with the merges of feedback.lua.
func (m *Memory) Learn(ctx context.Context, key string, l Learned) error {
	if err := l.Validate(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.empty() {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.micros()
	if m.feedback == nil {
		m.feedback = make(map[string]*memFeedback)
	}
	f := m.feedback[key]
	if f == nil || f.expires() <= now {
		f = &memFeedback{}
		m.feedback[key] = f
	}
	if l.Pause > 0 {
		f.pause = max(f.pause, now+micros(l.Pause))
	}
	if l.Limit.N > 0 && l.LimitTTL > 0 {
		f.n, f.w, f.until = int64(l.Limit.N), micros(l.Limit.Per), now+micros(l.LimitTTL)
	}
	if l.Reset > 0 {
		at := now + micros(l.Reset)
		rem := int64(l.Remaining)
		switch {
		case f.reset > now && abs(at-f.reset) <= micros(ResetSlack):
			f.budget = min(f.budget, rem)
			f.reset = max(f.reset, at)
		case at > f.reset:
			f.budget, f.reset = rem, at
		}
	}
	return nil
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// feedbackSlot applies key's feedback to the slot s that the limits gave, as
// reserve.lua does; m.mu is held. It returns the new slot and its source (0
// the limits, 1 the upstream, 2 the learned limit), the budget's reset when a
// slot before it must spend the budget, and, when a pause or an exhausted
// budget ends more than serverWait away, the time until it ends (refuse > 0).
func (m *Memory) feedbackSlot(key string, now, s int64, cost int, live []int64, maxW, serverWait int64) (slot int64, source int, budgetReset, refuse int64) {
	f := m.feedback[key]
	if f == nil {
		return s, 0, 0, 0
	}
	if f.expires() <= now {
		delete(m.feedback, key)
		return s, 0, 0, 0
	}
	hold := f.pause
	if f.reset > now {
		if f.budget < int64(cost) {
			hold = max(hold, f.reset)
		} else {
			budgetReset = f.reset
		}
	}
	if hold > now {
		if hold-now > serverWait {
			return s, 1, 0, hold - now
		}
		if hold >= s {
			s, source = hold, 1
		}
	}
	if f.until > now && f.w <= maxW {
		if k := max(f.n-int64(cost)+1, 1); k <= int64(len(live)) {
			if t := live[int64(len(live))-k] + f.w; t > s {
				s, source = t, 2
			}
		}
	}
	return s, source, budgetReset, 0
}

// spend takes cost units from key's budget; m.mu is held.
func (m *Memory) spend(key string, cost int) {
	if f := m.feedback[key]; f != nil {
		f.budget -= int64(cost)
	}
}
