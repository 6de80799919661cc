package throttle_test

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/store"
)

// TestConfigValidation checks that New refuses every bad configuration with
// a *ConfigError that says what is wrong.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	lim := []throttle.Limit{throttle.PerSecond(10)}
	ok := throttle.Rule{Host: "api.example.com", Limits: lim}
	with := func(f func(r *throttle.Rule)) throttle.Option {
		r := ok
		f(&r)
		return throttle.WithRule(r)
	}
	mem := newMemory(t)
	tests := []struct {
		name string
		st   store.Store // nil: mem
		base http.RoundTripper
		opts []throttle.Option
		// nilStore passes a nil store.
		nilStore bool
		want     string // a fragment of the error; "" means valid
	}{
		{name: "valid", opts: []throttle.Option{throttle.WithRule(ok)}},
		{name: "valid default only", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{Limits: lim})}},
		{name: "valid NoMargin", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Margin = throttle.NoMargin })}},
		{name: "valid FailFast", opts: []throttle.Option{with(func(r *throttle.Rule) { r.FailFast = true })}},
		{name: "valid Per 1ms", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(1, time.Millisecond)} })}},
		{name: "nil store", nilStore: true, opts: []throttle.Option{throttle.WithRule(ok)}, want: "nil store"},
		{name: "no rules", want: "no rules"},
		{name: "empty Host", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "" })}, want: "Host is empty"},
		{name: "Host as a URL", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "https://api.example.com" })}, want: "not a URL"},
		{name: "Host with a path", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "api.example.com/v1" })}, want: "not a URL"},
		{name: "wildcard inside", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "api.*.com" })}, want: "a wildcard must be"},
		{name: "wildcard without dot", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "*example.com" })}, want: "a wildcard must be"},
		{name: "wildcard alone", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Host = "*." })}, want: "a wildcard must be"},
		{name: "PathPrefix without slash", opts: []throttle.Option{with(func(r *throttle.Rule) { r.PathPrefix = "v1" })}, want: "must start with /"},
		{name: "default with Host", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{Host: "a.example.com", Limits: lim})}, want: "takes no Host"},
		{name: "default with PathPrefix", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{PathPrefix: "/v1", Limits: lim})}, want: "takes no Host"},
		{name: "default with Method", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{Method: "GET", Limits: lim})}, want: "takes no Host"},
		{name: "WithDefault twice", opts: []throttle.Option{
			throttle.WithDefault(throttle.Rule{Limits: lim}), throttle.WithDefault(throttle.Rule{Limits: lim}),
		}, want: "WithDefault given twice"},
		{name: "no limits", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = nil })}, want: "no Limits"},
		{name: "N zero", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.PerSecond(0)} })}, want: "N must be at least 1"},
		{name: "N negative", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{throttle.PerSecond(5), throttle.PerHour(-1)}
		})}, want: "limit 1 (-1/1h0m0s): N must be at least 1"},
		{name: "Per below 1ms", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(1, 999*time.Microsecond)} })}, want: "Per must be from 1ms"},
		{name: "Per zero", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{{N: 1}} })}, want: "Per must be from 1ms"},
		{name: "Per above MaxPer", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(1, throttle.MaxPer+1)} })}, want: "Per must be from 1ms"},
		{name: "valid Per MaxPer", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(1, throttle.MaxPer)} })}},
		{name: "Margin above a minute", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Margin = time.Hour })}, want: "Margin 1h0m0s is above"},
		{name: "same name, other limits", opts: []throttle.Option{
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example", Limits: lim}),
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "b.example", Limits: []throttle.Limit{throttle.PerSecond(11)}}),
		}, want: "must have the same Limits"},
		{name: "valid same name, same limits", opts: []throttle.Option{
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example", Limits: lim}),
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "b.example", Limits: lim}),
		}},
		{name: "valid buckets", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Algorithm, r.Limits = throttle.Buckets, []throttle.Limit{{N: 1_000_000, Per: 24 * time.Hour, Precision: time.Hour}}
		})}},
		{name: "valid counter", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Algorithm = throttle.SlidingCounter })}},
		{name: "Precision on the log", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{{N: 10, Per: time.Second, Precision: 100 * time.Millisecond}}
		})}, want: "Precision is for the buckets algorithm, not log"},
		{name: "too many buckets", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.Algorithm, r.Limits = throttle.Buckets, []throttle.Limit{{N: 10, Per: time.Hour, Precision: 100 * time.Millisecond}}
		})}, want: "36001 buckets, more than 4096"},
		{name: "unknown Algorithm", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Algorithm = throttle.Algorithm(8) })}, want: "unknown algorithm 8"},
		{name: "same name, other algorithm", opts: []throttle.Option{
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example", Limits: lim}),
			throttle.WithRule(throttle.Rule{Name: "gw", Host: "b.example", Limits: lim, Algorithm: throttle.FixedWindow}),
		}, want: "must have the same Limits, Margin and Algorithm"},
		{name: "negative MaxWait", opts: []throttle.Option{with(func(r *throttle.Rule) { r.MaxWait = -time.Second })}, want: "negative MaxWait"},
		{name: "MaxWait with FailFast", opts: []throttle.Option{with(func(r *throttle.Rule) {
			r.FailFast, r.MaxWait = true, time.Second
		})}, want: "MaxWait is set but so is FailFast"},
		{name: "negative Margin", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Margin = -2 })}, want: "negative Margin"},
		{name: "very negative Margin", opts: []throttle.Option{with(func(r *throttle.Rule) { r.Margin = -time.Second })}, want: "negative Margin"},
		{name: "nil option", opts: []throttle.Option{throttle.WithRule(ok), nil}, want: "nil option"},
		{name: "nil hook", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithOnDecision(nil)}, want: "WithOnDecision: nil function"},
		{name: "nil logger", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithLogger(nil)}, want: "WithLogger: nil logger"},
		{name: "typed nil store", st: (*fakestore.Store)(nil), opts: []throttle.Option{throttle.WithRule(ok)}, want: "nil store"},
		{name: "typed nil base", base: (*http.Transport)(nil), opts: []throttle.Option{throttle.WithRule(ok)}, want: "base is a nil *http.Transport"},
		{name: "nil func base", base: roundTripperFunc(nil), opts: []throttle.Option{throttle.WithRule(ok)}, want: "base is a nil throttle_test.roundTripperFunc"},
		{name: "valid FailOpen", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailOpen()}},
		{name: "valid FailLocal", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailLocal(0.25)}},
		{name: "valid FailLocal share 1, given first", opts: []throttle.Option{throttle.WithFailLocal(1), throttle.WithRule(ok)}},
		{name: "FailOpen and FailLocal", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailOpen(), throttle.WithFailLocal(0.5)}, want: "WithFailOpen and WithFailLocal"},
		{name: "FailLocal and FailOpen", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailLocal(0.5), throttle.WithFailOpen()}, want: "WithFailOpen and WithFailLocal"},
		{name: "share zero", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailLocal(0)}, want: "WithFailLocal(0): the share must be above 0 and at most 1"},
		{name: "share negative", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailLocal(-0.5)}, want: "WithFailLocal(-0.5)"},
		{name: "share above 1", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailLocal(1.5)}, want: "WithFailLocal(1.5)"},
		{name: "share NaN", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailLocal(math.NaN())}, want: "WithFailLocal(NaN)"},
		{name: "share infinite", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithFailLocal(math.Inf(1))}, want: "WithFailLocal(+Inf)"},
		{name: "valid store timeout", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreTimeout(50 * time.Millisecond)}},
		{name: "zero store timeout", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreTimeout(0)}, want: "WithStoreTimeout(0s): the timeout must be positive"},
		{name: "negative store timeout", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithStoreTimeout(-time.Second)}, want: "WithStoreTimeout(-1s)"},
		{name: "valid key secret", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithKeySecret(make([]byte, throttle.MinKeySecretLen))}},
		{name: "nil key secret", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithKeySecret(nil)}, want: "WithKeySecret: the secret has 0 bytes; it needs at least 16"},
		{name: "empty key secret", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithKeySecret([]byte{})}, want: "the secret has 0 bytes"},
		{name: "short key secret", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithKeySecret([]byte("hunter2"))}, want: "the secret has 7 bytes"},
		{name: "only a nil option", opts: []throttle.Option{nil}, want: "nil option"},
		{name: "valid WithUnmatchedSent", opts: []throttle.Option{throttle.WithRule(ok), throttle.WithUnmatchedSent(true)}},
		{name: "WithUnmatchedSent and WithDefault", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{Limits: lim}),
			throttle.WithUnmatchedSent(false)}, want: "WithUnmatchedSent and WithDefault"},
		{name: "default rule without limits", opts: []throttle.Option{throttle.WithDefault(throttle.Rule{})}, want: `rule "default": no Limits`},
		{name: "second of two rules invalid", opts: []throttle.Option{throttle.WithRule(ok),
			throttle.WithRule(throttle.Rule{Name: "b", Host: "b.example", Limits: []throttle.Limit{throttle.PerSecond(-3)}})}, want: `rule "b": limit 0 (-3/1s): N must be at least 1`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st store.Store = mem
			if tc.st != nil {
				st = tc.st
			}
			if tc.nilStore {
				st = nil
			}
			tr, err := throttle.New(tc.base, st, tc.opts...)
			if tc.want == "" {
				require.NoError(t, err)
				assert.NotNil(t, tr)
				return
			}
			require.Error(t, err)
			assert.Nil(t, tr)
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "throttle: invalid configuration: "), err.Error())
		})
	}
}
