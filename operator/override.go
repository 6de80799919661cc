package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/inspect"
	"github.com/throttle-go/throttle/store"
)

// Override is an operator's override of a rule's limits, for every process
// that runs the rule on one store (SetLimits).
type Override struct {
	// Limits replace the rule's limits one for one, in the rule's order,
	// as written (without Margin; the rule's default pace follows them).
	// Each may only be tighter than the rule's own: a lower N, a longer
	// window, a lower burst.
	Limits []throttle.Limit
	// For is how long the override lasts (0: until ClearLimits).
	For time.Duration
	// By says who set it; empty: the OS user and host of this process.
	By string

	// At is when it was set, and Until when it expires (zero: until
	// cleared), on the setter's clock; Limits reads them.
	At, Until time.Time
}

// LimitChange is one entry of a rule's history of overrides (LimitHistory).
type LimitChange struct {
	At time.Time
	By string
	// Cleared says the override was removed: To is then the rule's own
	// limits.
	Cleared bool
	// From and To are the limits before and after: an override's, or the
	// rule's own as its processes publish them.
	From, To []throttle.Limit
	// Until is when the override set expires (zero: until cleared).
	Until time.Time
}

// ErrNoOverrides is matched, with errors.Is, by the errors of SetLimits,
// ClearLimits, Limits and LimitHistory when the store keeps no overrides.
var ErrNoOverrides = errors.New("operator: the store keeps no overrides")

// ErrRaise is matched, with errors.Is, by the error of SetLimits when an
// override would raise a limit of the rule as a process runs it: overrides
// only tighten. Raising a limit takes a change of the code.
var ErrRaise = errors.New("operator: an override may only tighten a rule's limits")

// SetLimits stores o as the override of the limits of the rule named rule,
// which every process running the rule on st honours from its next request
// after at most a second, until o.For has passed or ClearLimits is called,
// and records the change in the rule's history (LimitHistory). The
// processes' reservations already made stay; the new limits count them.
//
// The rule must be published by a running process (see Published), and o
// must be tighter than every definition published: else the error matches
// ErrUnknownRule or ErrRaise. A process whose own rule the override would
// raise keeps its limits (and logs why).
func SetLimits(ctx context.Context, st store.Store, rule string, o Override) error {
	src, ok := st.(contract.Overrides)
	if !ok {
		return fmt.Errorf("%w (%T)", ErrNoOverrides, st)
	}
	if o.For < 0 {
		return fmt.Errorf("operator: a negative For (%s)", o.For)
	}
	defs, err := definitions(ctx, st, rule)
	if err != nil {
		return err
	}
	to := make([]contract.Limit, len(o.Limits))
	for i, l := range o.Limits {
		to[i] = contract.Limit(l)
	}
	for _, d := range defs {
		if err := inspect.Tighter(to, d); err != nil {
			return fmt.Errorf("%w: rule %q: %v", ErrRaise, rule, err)
		}
	}
	from, err := before(ctx, src, rule, defs[0])
	if err != nil {
		return err
	}
	now := time.Now()
	doc := inspect.OverrideDoc{Limits: to, At: now.UnixMilli(), By: who(o.By)}
	if o.For > 0 {
		doc.Until = now.Add(o.For).UnixMilli()
	}
	entry := inspect.OverrideEntry{At: doc.At, By: doc.By, From: from, To: to, Until: doc.Until}
	db, eb, err := marshal(doc, entry)
	if err != nil {
		return err
	}
	return src.SetOverride(ctx, rule, db, o.For, eb)
}

// ClearLimits removes the override of the rule named rule, if any: every
// process returns to the rule's own limits at its next request after at
// most a second. by says who (empty: the OS user and host). The change is
// recorded in the rule's history.
func ClearLimits(ctx context.Context, st store.Store, rule, by string) error {
	src, ok := st.(contract.Overrides)
	if !ok {
		return fmt.Errorf("%w (%T)", ErrNoOverrides, st)
	}
	defs, err := definitions(ctx, st, rule)
	if err != nil && !errors.Is(err, ErrUnknownRule) {
		return err
	}
	var code []contract.Limit
	if len(defs) > 0 {
		code = defs[0]
	}
	from, err := before(ctx, src, rule, code)
	if err != nil {
		return err
	}
	entry := inspect.OverrideEntry{At: time.Now().UnixMilli(), By: who(by), Cleared: true, From: from, To: code}
	_, eb, err := marshal(nil, entry)
	if err != nil {
		return err
	}
	return src.ClearOverride(ctx, rule, eb)
}

// Limits returns the override of the rule named rule, and false when it
// has none.
func Limits(ctx context.Context, st store.Store, rule string) (Override, bool, error) {
	src, ok := st.(contract.Overrides)
	if !ok {
		return Override{}, false, fmt.Errorf("%w (%T)", ErrNoOverrides, st)
	}
	docs, err := src.Overrides(ctx, []string{rule})
	if err != nil {
		return Override{}, false, err
	}
	b, ok := docs[rule]
	if !ok {
		return Override{}, false, nil
	}
	var d inspect.OverrideDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return Override{}, false, fmt.Errorf("operator: the override of rule %q cannot be read: %w", rule, err)
	}
	o := Override{Limits: fromContract(d.Limits), By: d.By, At: time.UnixMilli(d.At)}
	if d.Until != 0 {
		o.Until = time.UnixMilli(d.Until)
		o.For = o.Until.Sub(o.At)
	}
	return o, true, nil
}

// LimitHistory returns the changes of the overrides of the rule named
// rule, newest first: the last 100 at most. An entry that cannot be read
// is skipped.
func LimitHistory(ctx context.Context, st store.Store, rule string) ([]LimitChange, error) {
	src, ok := st.(contract.Overrides)
	if !ok {
		return nil, fmt.Errorf("%w (%T)", ErrNoOverrides, st)
	}
	raw, err := src.OverrideHistory(ctx, rule)
	if err != nil {
		return nil, err
	}
	out := make([]LimitChange, 0, len(raw))
	for _, b := range raw {
		var e inspect.OverrideEntry
		if json.Unmarshal(b, &e) != nil {
			continue
		}
		c := LimitChange{At: time.UnixMilli(e.At), By: e.By, Cleared: e.Cleared, From: fromContract(e.From), To: fromContract(e.To)}
		if e.Until != 0 {
			c.Until = time.UnixMilli(e.Until)
		}
		out = append(out, c)
	}
	return out, nil
}

// definitions returns the limits of every definition of rule the processes
// publish, the first one's first; ErrUnknownRule when none does.
func definitions(ctx context.Context, st store.Store, rule string) ([][]contract.Limit, error) {
	ps, err := Published(ctx, st)
	if err != nil {
		return nil, err
	}
	var out [][]contract.Limit
	for _, p := range ps {
		for _, r := range p.Rules {
			if r.Name == rule {
				ls := make([]contract.Limit, len(r.Limits))
				for i, l := range r.Limits {
					ls[i] = contract.Limit(l)
				}
				out = append(out, ls)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %q: no running process publishes it, so an override cannot be checked against its limits (a process publishes at its first request, and for 30 s after its last)", ErrUnknownRule, rule)
	}
	return out, nil
}

// before is what the rule's limits are now: its override's, else code.
func before(ctx context.Context, src contract.Overrides, rule string, code []contract.Limit) ([]contract.Limit, error) {
	docs, err := src.Overrides(ctx, []string{rule})
	if err != nil {
		return nil, err
	}
	var d inspect.OverrideDoc
	if b, ok := docs[rule]; ok && json.Unmarshal(b, &d) == nil {
		return d.Limits, nil
	}
	return code, nil
}

// who is by, else the OS user and host of this process.
func who(by string) string {
	if by != "" {
		return by
	}
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

func marshal(doc any, entry inspect.OverrideEntry) (d, e []byte, err error) {
	if doc != nil {
		if d, err = json.Marshal(doc); err != nil {
			return nil, nil, err
		}
	}
	if e, err = json.Marshal(entry); err != nil {
		return nil, nil, err
	}
	if len(d) > contract.MaxOverrideDoc || len(e) > contract.MaxOverrideDoc {
		return nil, nil, fmt.Errorf("operator: an override of %d limits is too long for the store", len(entry.To))
	}
	return d, e, nil
}

func fromContract(ls []contract.Limit) []throttle.Limit {
	out := make([]throttle.Limit, len(ls))
	for i, l := range ls {
		out[i] = throttle.Limit(l)
	}
	return out
}
