package throttle

import (
	"context"
	"net/http"
	"time"
)

// This file is the shadow rules (Rule.Shadow): a rule that reserves and
// records its slots exactly as an enforced rule would, through the engine's
// Reserve (the slot without the wait), and reports what it would have done,
// but never makes a request wait or fail. The slot an enforced rule would
// wait for stays recorded in the shadow rule's own logs, where the enforced
// rule would have sent; a slot beyond MaxWait or the deadline is a would-be
// refusal and records nothing, as an enforced refusal does. So the shadow
// logs hold what an enforced rule's would, and its counters count the
// waits and refusals it would have caused.

// checkShadows refuses what a shadow rule cannot be: the default rule (a
// shadow rule is matched beside the enforced one, never instead of it), a
// rule with InFlight (a shadow holds no lease: it sends nothing itself) or
// Retries (it never sees a response of its own), or a rule that shares its
// name, and so its logs, with an enforced rule.
func checkShadows(rules []*rule, def *rule) error {
	if def != nil && def.Shadow {
		return def.fail("the default rule cannot be a shadow rule: give it a Host with WithRule")
	}
	enforced := map[string]bool{}
	if def != nil {
		enforced[def.Name] = true
	}
	for _, r := range rules {
		if !r.Shadow {
			enforced[r.Name] = true
		}
	}
	for _, r := range rules {
		if r.Shadow {
			if err := r.checkShadow(); err != nil {
				return err
			}
			if enforced[r.Name] {
				return r.fail("a shadow rule needs a name of its own: an enforced rule of the same name would share its logs")
			}
		}
	}
	return nil
}

// checkShadow refuses the fields a shadow rule has no use for.
func (c *rule) checkShadow() error {
	switch {
	case c.InFlight != 0:
		return c.fail("InFlight in a shadow rule: a shadow rule holds no lease, since it sends nothing itself")
	case c.Retries != 0:
		return c.fail("Retries in a shadow rule: a shadow rule never retries, since it sends nothing itself")
	}
	return nil
}

// splitShadows returns the enforced rules of rules and the shadow ones.
func splitShadows(rules []*rule) (enforced, shadows []*rule) {
	for _, r := range rules {
		if r.Shadow {
			shadows = append(shadows, r)
		} else {
			enforced = append(enforced, r)
		}
	}
	return enforced, shadows
}

// shadow reserves for req under the shadow rule that matches it best, if
// any, and observes what that rule would have done. Nothing it meets, a
// refusal, a key it cannot derive or a failed store, reaches the request:
// the request goes on to its enforced rule, in the caller.
func (t *Transport) shadow(ctx context.Context, req *http.Request) {
	r := bestMatch(t.shadows, req)
	if r == nil {
		return
	}
	k, err := t.keyOf(r, req)
	if err != nil {
		d := r.failed(k, err)
		d.Shadow = true
		t.observe(ctx, r.stats, d)
		return
	}
	t.observe(ctx, r.stats, t.shadowed(ctx, r, k, r.maxWait))
}

// shadowed takes k's slot under the shadow rule r, within maxWait, without
// waiting for it, and returns the Decision an enforced r would have made:
// Sent after Delay when it got a slot (recorded, and left recorded, as the
// enforced rule's send would be), Limited when the slot lay beyond maxWait
// or the deadline (nothing recorded), Failed or FailedOpen when the store
// failed.
func (c *core) shadowed(ctx context.Context, r *rule, k keyed, maxWait time.Duration) Decision {
	a := c.eng.Reserve(ctx, r.current(), k.eng(), maxWait) // internal/engine: the slot, not the wait
	d := r.decision(k, &a.Verdict)
	d.Shadow = true
	return d
}

// bestMatch returns the rule of rules that matches req most specifically
// (see Rule), or nil.
func bestMatch(rules []*rule, req *http.Request) *rule {
	var best *rule
	bestScore := -1
	for _, r := range rules {
		if s, ok := r.matches(req); ok && s > bestScore {
			best, bestScore = r, s
		}
	}
	return best
}
