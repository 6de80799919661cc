package throttle

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is a rule's more keys (Rule.Also): their validation, their keys
// for a request, and what the failure policy's local limiter keeps of them.
// docs/keys.md says how they are reserved, over one Cluster slot or several.

// KeyLimit is one more rate key of a rule, with its own limits, that must
// admit a request too: e.g. an app-wide limit beside the rule's per-token
// Key and Limits. A request is reserved under every key of its rule at the
// earliest time all of them allow, and counted in all at the time it is
// sent (docs/keys.md).
type KeyLimit struct {
	// Name names the key within its rule (errors, the store's key): not
	// empty, unique in the rule, without braces.
	Name string
	// Key derives the rate key, as Rule.Key (hashed alike). Required; e.g.
	// Fixed("my-app") for one log per rule.
	Key KeyFunc
	// Limits must all admit the request under Key: window limits (no
	// Paced, no Precision), with the rule's Margin added, as Rule.Limits.
	// A limit of a unit (Limit.Of) counts that unit under Key, each
	// request costing what the rule's Costs estimates for it, settled by
	// its Actual (docs/costs.md); at least one limit counts requests.
	Limits []Limit
	// HashTag makes this key's value the Redis hash tag of every key of a
	// request, so that they share a Cluster slot: one store call per
	// request instead of one per slot (docs/keys.md). Optional, at most one
	// per rule; it spreads the rule's keys less over a Cluster.
	HashTag bool

	zone *time.Location // Daily: the key changes at each midnight there (calendar.go)
}

// alsoKey is a validated KeyLimit.
type alsoKey struct {
	KeyLimit
	own []Limit // the Limits of requests, as given
	eff []Limit // own with the rule's Margin
	// limits is eff as the store takes it.
	limits []contract.Limit
	units  []unitRule // the Limits of units (cost.go)
	scope  string     // the rule's scope, then Name and ":"
}

// compileAlso validates c's Also and prepares it; c.scope and c.eff are set.
func (c *rule) compileAlso() error {
	if c.Also == nil {
		return nil
	}
	if len(c.Also) == 0 {
		return c.fail("Also is empty (nil for none)")
	}
	if c.Algorithm != SlidingLog {
		return c.fail("Also needs the SlidingLog algorithm, not %s", c.Algorithm)
	}
	c.Also = slices.Clone(c.Also) // the caller may reuse its slice
	for i, a := range c.Also {
		if err := c.compileAlsoKey(i, a); err != nil {
			return err
		}
	}
	// What the store would refuse on every request fails here instead.
	probe := contract.Request{Limits: limits(c.eff), Cost: 1, Also: c.parts(nil)}
	for _, a := range c.also {
		for _, u := range a.units {
			probe.Also = append(probe.Also, contract.Part{Key: a.scope + a.Name, Unit: u.name, Limits: u.eff})
		}
	}
	if err := probe.Validate("rule"); err != nil {
		return c.fail("%s", strings.TrimPrefix(err.Error(), contract.ErrInvalidRequest.Error()+": "))
	}
	return nil
}

// compileAlsoKey validates a, c's Also[i], and appends it to c.also; c.tag
// and c.minN take it into account.
func (c *rule) compileAlsoKey(i int, a KeyLimit) error {
	switch {
	case a.Name == "" || strings.ContainsAny(a.Name, "{}"):
		return c.fail("Also[%d]: Name %q must be set, without braces", i, a.Name)
	case a.Key == nil:
		return c.fail("Also[%d] (%s): no Key", i, a.Name)
	case len(a.Limits) == 0:
		return c.fail("Also[%d] (%s): no Limits", i, a.Name)
	}
	for _, o := range c.also {
		if o.Name == a.Name {
			return c.fail("Also[%d]: Name %q used twice", i, a.Name)
		}
	}
	if a.HashTag {
		if c.tag >= 0 {
			return c.fail("Also[%d] (%s): HashTag set on two keys", i, a.Name)
		}
		c.tag = i
	}
	k := alsoKey{KeyLimit: a, scope: c.scope + a.Name + ":"}
	for j, l := range a.Limits {
		if l.N < 1 || l.Per < time.Millisecond || l.Per > maxPer {
			return c.fail("Also[%d] (%s) limit %d (%s): N must be at least 1, Per from 1ms to %s", i, a.Name, j, l, maxPer)
		}
		if l.Unit != "" {
			if err := c.alsoUnit(&k, i, l); err != nil {
				return err
			}
			continue
		}
		e := l
		e.Per += c.Margin
		k.own = append(k.own, l)
		k.eff = append(k.eff, e)
		k.limits = append(k.limits, contract.Limit(e))
		c.minN = min(c.minN, l.N)
	}
	if len(k.own) == 0 {
		return c.fail("Also[%d] (%s): no limit of requests beside the limits of units", i, a.Name)
	}
	c.also = append(c.also, k)
	return nil
}

// alsoUnit adds the limit l of a unit to k, c's Also[i]: its estimate is the
// rule's Costs for the unit.
func (c *rule) alsoUnit(k *alsoKey, i int, l Limit) error {
	j := slices.IndexFunc(k.units, func(u unitRule) bool { return u.name == l.Unit })
	if j < 0 {
		est := c.Costs[l.Unit]
		if est == nil {
			return c.fail("Also[%d] (%s): unit %q: no estimate in Costs", i, k.Name, l.Unit)
		}
		j = len(k.units)
		k.units = append(k.units, unitRule{name: l.Unit, estimate: est, maxCost: l.N})
	}
	u := &k.units[j]
	e := contract.Limit(l)
	e.Per += c.Margin
	e.Unit = ""
	u.limits, u.eff, u.maxCost = append(u.limits, l), append(u.eff, e), min(u.maxCost, l.N)
	return nil
}

// alsoUnits reports whether a limit of c's Also counts unit ("": any).
func (c *rule) alsoUnits(unit string) bool {
	for _, a := range c.Also {
		for _, l := range a.Limits {
			if l.Unit != "" && (unit == "" || l.Unit == unit) {
				return true
			}
		}
	}
	return false
}

// parts returns the store's parts of c's Also, keyed by keys (nil: by name,
// for validation).
func (c *rule) parts(keys []string) []contract.Part {
	out := make([]contract.Part, len(c.also))
	for i, a := range c.also {
		out[i] = contract.Part{Key: a.scope + a.Name, Limits: a.limits}
		if keys != nil {
			out[i].Key = keys[i]
		}
	}
	return out
}

// keyAlso derives the keys of r's Also for req into k: each hashed as the
// rule's key and scoped by its name, and, with a HashTag, every key of the
// request, k's own included, under the same tag.
func (t *Transport) keyAlso(r *rule, req *http.Request, k *keyed) error {
	keys := make([]string, len(r.also))
	tag := ""
	now := t.now()
	for i, a := range r.also {
		v, err := a.Key(req)
		if err == nil && v == "" {
			err = keyErr("the key function returned an empty key")
		}
		if err != nil {
			return &KeyError{Rule: r.Name, Reason: a.Name + ": " + err.Error()}
		}
		v = t.storeKey(a.dayKey(v, now)) // hashed with its day: no raw key reaches the store
		keys[i] = a.scope + v
		if i == r.tag {
			tag = v
		}
	}
	if r.tag >= 0 {
		if strings.ContainsAny(tag, "{}") {
			tag = hashed("sha256:", tag) // a brace would end the tag early
		}
		tag = "{" + tag + "}"
		k.skey = tag + k.skey
		for i := range keys {
			keys[i] = tag + keys[i]
		}
	}
	k.also = r.parts(keys)
	return nil
}
