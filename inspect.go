package throttle

import "github.com/throttle-go/throttle/internal/inspect"

// This file is the one seam through which the operator package reads a
// Transport (internal/inspect): its rules, how it stores a rate key, its
// store; and derives a credential's rate key. Nothing is exported for it.

func init() {
	inspect.Transport = view
	inspect.CredentialKey = credentialKey // keyfunc.go
}

// view is what the operator package sees of v, a *Transport or a *Limiter.
func view(v any) (inspect.View, bool) {
	var c *core
	var rules []*rule
	switch t := v.(type) {
	case *Transport:
		if t != nil {
			c, rules = t.core, append(t.rules[:len(t.rules):len(t.rules)], t.def)
		}
	case *Limiter:
		if t != nil {
			c, rules = t.c, []*rule{t.r}
		}
	}
	if c == nil {
		return inspect.View{}, false
	}
	vw := inspect.View{StoreKey: c.storeKey, Store: c.eng.Store()}
	for _, r := range rules {
		if r == nil {
			continue
		}
		ir := inspect.Rule{Name: r.Name, Scope: r.scope, Limits: r.current().Limits, Algorithm: r.plan.Algorithm, InFlight: r.InFlight}
		if r.tag >= 0 {
			ir.HashTag = r.also[r.tag].Name
		}
		vw.Rules = append(vw.Rules, ir)
	}
	return vw, true
}
