package throttle

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/internal/inspect"
	"github.com/throttle-go/throttle/store"
)

// This file honours the limits an operator sets at runtime (throttle set,
// operator.SetLimits): each Transport or Limiter polls its rules' overrides
// in the store at most once per overrideEvery, in one round trip, in the
// background of a request, as it publishes its rules (publish.go); a
// change builds a new engine.Plan for the rule, swapped atomically, so that
// an admission on its way keeps the plan it started with. An override only
// tightens: one that would raise a limit of this process's rule is ignored
// (and logged).
//
// The override is not read in the reservation's own script: on a Redis
// Cluster a rule-wide key cannot be read in the same script as every rate
// key. A store that can (contract.OverridesRider: store.Redis) reads it in
// the same round trip instead, pipelined with the next reservation, so a
// poll costs no call of its own; others are polled on their own. So a
// change reaches a process at most overrideEvery (plus one store call)
// after it is set, from its next request on.

const (
	overrideEvery   = time.Second
	overrideTimeout = time.Second
)

// overridden is a rule under an override: its limits as written, the plan
// built from them, and the largest cost they admit.
type overridden struct {
	limits []Limit
	plan   *engine.Plan
	minN   int
	doc    []byte // as read, to tell a change
	// refused: the record would raise a limit of the rule, or cannot be
	// read; the plan is the code's.
	refused bool
}

// current is the plan a new admission of c uses: the override's, else the
// code's.
func (c *rule) current() *engine.Plan {
	if o := c.ov.Load(); o != nil {
		return o.plan
	}
	return &c.plan
}

// maxCost is the largest cost c admits now.
func (c *rule) maxCost() int {
	if o := c.ov.Load(); o != nil {
		return o.minN
	}
	return c.minN
}

// code is c's limits as written, without its default pace.
func (c *rule) code() []Limit {
	if c.auto < 0 {
		return c.Limits
	}
	return c.Limits[:c.auto:c.auto]
}

// override builds c under the limits ls, or says why they cannot replace
// c's own.
func (c *rule) override(ls []Limit) (*overridden, error) {
	if err := inspect.Tighter(limits(ls), limits(c.code())); err != nil {
		return nil, err
	}
	r := c.Rule
	r.Limits = ls
	p := c.plan // a copy: Leases, waits and the rest stay the code's
	p.Limits, p.Auto = nil, -1
	o := &overridden{limits: ls, plan: &p, minN: c.minN}
	for _, l := range ls {
		e := l
		e.Per += c.Margin
		p.Limits = append(p.Limits, contract.Limit(e))
		o.minN = min(o.minN, l.N)
		if l.Paced {
			o.minN = min(o.minN, l.Burst+1)
		}
	}
	if c.auto >= 0 {
		if d, ok := defaultPace(r); ok { // shape.go: the pace of the new limits
			d.Per += c.Margin
			p.Auto = len(p.Limits)
			p.Limits = append(p.Limits, contract.Limit(d))
			o.minN = min(o.minN, d.Burst+1)
		}
	}
	probe := contract.Request{Limits: p.Limits, Cost: 1, Algorithm: p.Algorithm}
	if err := probe.Validate("override"); err != nil {
		return nil, err
	}
	return o, nil
}

// overrider polls the overrides of a Transport's or a Limiter's rules.
type overrider struct {
	src       contract.Overrides      // nil: the store keeps none
	rider     contract.OverridesRider // nil: the store polls only on its own
	inProcess bool                    // poll in the caller: no I/O to wait for
	rules     []*rule
	names     []string
	now       func() time.Time
	logger    *slog.Logger
	changed   func() // called after a change was applied

	mu     sync.Mutex
	last   time.Time // of the last poll begun
	busy   bool
	closed bool
	done   sync.WaitGroup
}

func newOverrider(st store.Store, rules []*rule, now func() time.Time, logger *slog.Logger) *overrider {
	o := &overrider{rules: rules, now: now, logger: logger}
	src, ok := st.(contract.Overrides)
	if !ok {
		return o
	}
	o.src, o.inProcess = src, st.Caps().InProcess
	o.rider, _ = st.(contract.OverridesRider)
	seen := map[string]bool{}
	for _, r := range rules {
		if !seen[r.Name] {
			seen[r.Name] = true
			o.names = append(o.names, r.Name)
		}
	}
	return o
}

// touch polls when it is due: in the caller for a store in this process,
// with the next reservation for a store that can (rode), else on a
// goroutine of its own, one at a time, bounded by overrideTimeout. A
// failed poll changes nothing: the rules keep what they last read.
func (o *overrider) touch() {
	if o == nil || o.src == nil {
		return
	}
	now := o.now()
	o.mu.Lock()
	if o.closed || o.busy || (!o.last.IsZero() && now.Sub(o.last) < overrideEvery) {
		o.mu.Unlock()
		return
	}
	o.busy, o.last = true, now
	// A ride is answered on the store's goroutine, never from within
	// RideOverrides: it may be asked for under o.mu. Nothing waits for it
	// (close): a ride that no reservation takes (an idle process, or one
	// closed) is simply never read.
	rides := !o.inProcess && o.rider != nil && o.rider.RideOverrides(o.names, o.rode)
	if !rides {
		o.done.Add(1)
	}
	o.mu.Unlock()
	switch {
	case rides:
	case o.inProcess:
		o.poll()
	default:
		go o.poll()
	}
}

func (o *overrider) poll() {
	defer o.done.Done()
	ctx, cancel := context.WithTimeout(context.Background(), overrideTimeout)
	defer cancel()
	o.rode(o.src.Overrides(ctx, o.names))
}

// rode applies docs, the overrides read (a poll's, or a ride's).
func (o *overrider) rode(docs map[string][]byte, err error) {
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if err == nil && !closed && o.apply(docs) && o.changed != nil {
		o.changed()
	}
	o.mu.Lock()
	o.busy = false
	o.mu.Unlock()
}

// apply sets each rule's override from docs (none: the code's limits), and
// reports whether any rule changed.
func (o *overrider) apply(docs map[string][]byte) bool {
	changed := false
	for _, r := range o.rules {
		doc := docs[r.Name]
		old := r.ov.Load()
		if old != nil && bytes.Equal(old.doc, doc) {
			continue
		}
		if doc == nil {
			if old != nil {
				r.ov.Store(nil)
				changed = true
				o.log(slog.LevelInfo, "throttle: override cleared; the rule's own limits apply", r, nil)
			}
			continue
		}
		next, err := o.read(r, doc)
		if err != nil {
			// The rule keeps its own limits; the record is remembered, so
			// that it is logged once.
			r.ov.Store(&overridden{plan: &r.plan, minN: r.minN, doc: doc, refused: true})
			changed = changed || (old != nil && !old.refused)
			o.log(slog.LevelWarn, "throttle: override ignored; the rule's own limits apply", r, err)
			continue
		}
		r.ov.Store(next)
		changed = true
		o.log(slog.LevelInfo, "throttle: override applied", r, nil, slog.String("limits", inspect.Format(limits(next.limits))))
	}
	return changed
}

// read decodes doc and builds r under it.
func (o *overrider) read(r *rule, doc []byte) (*overridden, error) {
	var d inspect.OverrideDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	ls := make([]Limit, len(d.Limits))
	for i, l := range d.Limits {
		ls[i] = Limit(l)
	}
	next, err := r.override(ls)
	if err != nil {
		return nil, err
	}
	next.doc = doc
	return next, nil
}

func (o *overrider) log(level slog.Level, msg string, r *rule, err error, attrs ...slog.Attr) {
	if o.logger == nil {
		return
	}
	attrs = append(attrs, slog.String("rule", r.Name))
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	o.logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// close stops the polls and waits for one on its way. It is idempotent.
func (o *overrider) close() {
	if o == nil || o.src == nil {
		return
	}
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.done.Wait()
}
