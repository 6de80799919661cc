package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/throttle-go/throttle/internal/contract"
)

// ErrUnknownRule is matched, with errors.Is, by the error of Usage and
// StoreKey for a rule name the Transport does not have.
var ErrUnknownRule = errors.New("throttle: no rule of that name")

// ErrNoUsage is matched, with errors.Is, by the error of Usage when the
// Transport's store cannot report usage.
var ErrNoUsage = errors.New("throttle: the store cannot report usage")

// rule returns the rule (or default rule) of the given name, nil if none.
func (t *Transport) ruleNamed(name string) *rule {
	for _, r := range t.rules {
		if r.Name == name {
			return r
		}
	}
	if t.def != nil && t.def.Name == name {
		return t.def
	}
	return nil
}

// StoreKey returns the key under which the rule named rule stores the state
// of rateKey, exactly as a request would: the rule's scope ("<rule>:"), then
// rateKey HMAC'd with WithKeySecret's secret when there is one, else hashed
// when longer than 200 bytes. rateKey is the key as the rule's KeyFunc
// returns it ("bearer:<hash>" from ByAuthorization, "pg1" from Fixed; see
// CredentialKey), never a raw token. The result is the store's key (a Redis
// store adds its prefix and braces around it).
func (t *Transport) StoreKey(rule, rateKey string) (string, error) {
	r := t.ruleNamed(rule)
	if r == nil {
		return "", fmt.Errorf("%w: %q", ErrUnknownRule, rule)
	}
	if rateKey == "" {
		return "", &KeyError{Rule: r.Name, Reason: "empty rate key"}
	}
	if r.tag >= 0 {
		// The tag is the value of an Also key for each request.
		return "", &KeyError{Rule: r.Name, Reason: "the rule's keys start with the hash tag of its Also key " + r.also[r.tag].Name + ", which only a request gives"}
	}
	return r.scope + t.storeKey(rateKey), nil
}

// Usage reports the state of one rate key of the rule named rule, in one
// read-only call to the store: units used per limit, the
// next free slot a request of cost 1 would get, the upstream's pause,
// learned limit, learned pace and budget. rateKey is the key as the rule's
// KeyFunc returns it, not a raw token: derive it from a token with
// CredentialKey. The stored key is derived as for a request (see StoreKey),
// and the limits are those a request reserves, under the rule's Algorithm:
// the rule's with its Margin (Per includes it), then, under the default
// shape, the pace the rule keeps by default (Rule.NoDefaultPace), one more
// entry of the Usage's Limits.
//
// Errors: ErrUnknownRule, a *KeyError for an empty key, ErrNoUsage, or the
// store's error. It calls the store directly, not through the failure
// policy: a store that is down gives its error.
func (t *Transport) Usage(ctx context.Context, rule, rateKey string) (contract.Usage, error) {
	key, err := t.StoreKey(rule, rateKey)
	if err != nil {
		return contract.Usage{}, err
	}
	st := t.eng.Store()
	if !st.Caps().Usage {
		return contract.Usage{}, fmt.Errorf("%w (%T)", ErrNoUsage, st)
	}
	r := t.ruleNamed(rule)
	return st.Usage(ctx, key, contract.Request{Limits: r.eff, Cost: 1, Algorithm: r.Algorithm})
}

// CredentialKey returns the rate key that a built-in KeyFunc derives from a
// request carrying credential, so that a tool can find a token's log
// without a request: by is "bearer" (ByAuthorization and ByBearerToken: the
// credential after the scheme), "query:<param>" (ByQuery) or
// "header:<Name>" (ByHeader). The key holds a hash of the credential, never
// the credential; no error holds it either.
func CredentialKey(by, credential string) (string, error) {
	if credential == "" {
		return "", &KeyError{Reason: "empty credential"}
	}
	kind, arg, _ := strings.Cut(by, ":")
	switch {
	case kind == "bearer" && arg == "":
		// As ByAuthorization reads it: the header's spaces are not the token's.
		if credential = strings.TrimSpace(credential); credential == "" {
			return "", &KeyError{Reason: "empty credential"}
		}
		return hashed(authPrefix, credential), nil
	case kind == "query" && arg != "":
		return hashed("query:"+arg+":", credential), nil
	case kind == "header" && arg != "":
		return hashed("header:"+http.CanonicalHeaderKey(arg)+":", credential), nil
	}
	return "", &KeyError{Reason: fmt.Sprintf("unknown key kind %q (want bearer, query:<param> or header:<Name>)", by)}
}
