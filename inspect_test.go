package throttle

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/inspect"
)

// keyUsage reads the state of rateKey under tr's rule named rule through
// the seam, as the operator package does (which these tests cannot import).
func keyUsage(t *testing.T, tr *Transport, rule, rateKey string) contract.Usage {
	t.Helper()
	v, ok := inspect.Transport(tr)
	require.True(t, ok)
	for _, r := range v.Rules {
		if r.Name == rule {
			u, err := v.Store.Usage(context.Background(), r.Scope+v.StoreKey(rateKey),
				contract.Request{Limits: r.Limits, Cost: 1, Algorithm: r.Algorithm})
			require.NoError(t, err)
			return u
		}
	}
	t.Fatalf("no rule %q", rule)
	return contract.Usage{}
}

// TestView: the seam shows every rule, the default last, with the limits a
// request reserves, its scope and its hash tag; the key as stored; the
// store. A nil or zero Transport, or another type, shows nothing.
func TestView(t *testing.T) {
	t.Parallel()
	st := newMemoryStore(t)
	tr, err := New(nil, st,
		WithRule(Rule{Name: "a", Host: "a.example", Limits: []Limit{PerSecond(10)}, NoDefaultPace: true}),
		WithRule(Rule{Name: "b", Host: "b.example", Limits: []Limit{PerHour(10)}, Margin: NoMargin, NoDefaultPace: true,
			Also: []KeyLimit{{Name: "app", Key: Fixed("app"), Limits: []Limit{PerHour(100)}, HashTag: true}}}),
		WithDefault(Rule{Limits: []Limit{PerMinute(10)}, Algorithm: FixedWindow}),
		WithKeySecret([]byte(strings.Repeat("s", minKeySecretLen))))
	require.NoError(t, err)
	v, ok := inspect.Transport(tr)
	require.True(t, ok)
	require.Len(t, v.Rules, 3)
	assert.Equal(t, inspect.Rule{Name: "a", Scope: "a:", Limits: limits([]Limit{Per(10, time.Second+defaultMargin)})}, v.Rules[0])
	assert.Equal(t, inspect.Rule{Name: "b", Scope: "b:", Limits: limits([]Limit{PerHour(10)}), HashTag: "app"}, v.Rules[1])
	assert.Equal(t, "default", v.Rules[2].Name)
	assert.Equal(t, FixedWindow, Algorithm(v.Rules[2].Algorithm))
	assert.Equal(t, tr.storeKey("k"), v.StoreKey("k"))
	assert.True(t, strings.HasPrefix(v.StoreKey("k"), "hmac:"))
	assert.Equal(t, st, v.Store)

	for _, x := range []any{nil, (*Transport)(nil), &Transport{}, tr.core, "t"} {
		_, ok := inspect.Transport(x)
		assert.False(t, ok, "%T", x)
	}
}

// TestCredentialKeySeam: the seam's CredentialKey is the root's.
func TestCredentialKeySeam(t *testing.T) {
	t.Parallel()
	r, err := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
	require.NoError(t, err)
	r.Header.Set("Authorization", "Bearer tok")
	want, err := ByAuthorization()(r)
	require.NoError(t, err)
	got, err := inspect.CredentialKey("bearer", "tok")
	require.NoError(t, err)
	assert.Equal(t, want, got)
}
