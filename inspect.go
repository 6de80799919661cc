package throttle

import "github.com/throttle-go/throttle/internal/inspect"

// This file is the one seam through which the operator package reads a
// Transport (internal/inspect): its rules, how it stores a rate key, its
// store; and derives a credential's rate key. Nothing is exported for it.

func init() {
	inspect.Transport = view
	inspect.CredentialKey = credentialKey // keyfunc.go
}

// view is what the operator package sees of v, a *Transport.
func view(v any) (inspect.View, bool) {
	t, ok := v.(*Transport)
	if !ok || t == nil || t.core == nil {
		return inspect.View{}, false
	}
	vw := inspect.View{StoreKey: t.storeKey, Store: t.eng.Store()}
	for _, r := range append(t.rules[:len(t.rules):len(t.rules)], t.def) {
		if r == nil {
			continue
		}
		ir := inspect.Rule{Name: r.Name, Scope: r.scope, Limits: r.current().Limits, Algorithm: r.plan.Algorithm}
		if r.tag >= 0 {
			ir.HashTag = r.also[r.tag].Name
		}
		vw.Rules = append(vw.Rules, ir)
	}
	return vw, true
}
