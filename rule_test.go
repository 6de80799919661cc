package throttle_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

// TestRuleMatching checks which rule a request gets.
func TestRuleMatching(t *testing.T) {
	t.Parallel()
	lim := []throttle.Limit{throttle.PerSecond(1000)}
	rules := []throttle.Rule{
		{Name: "exact", Host: "api.example.com", Limits: lim},
		{Name: "wild", Host: "*.example.com", Limits: lim},
		{Name: "pay8443", Host: "Pay.Example.com:8443", Limits: lim},
		{Name: "v1", Host: "api.example.com", PathPrefix: "/v1/", Limits: lim},
		{Name: "v1users", Host: "api.example.com", PathPrefix: "/v1/users", Limits: lim},
		{Name: "post", Host: "api.example.com", Method: http.MethodPost, Limits: lim},
		{Name: "wildv1", Host: "*.example.com", PathPrefix: "/v1/", Limits: lim},
		{Name: "anyport", Host: "ports.example.com", Limits: lim},
		{Name: "port443", Host: "ports.example.com:443", Limits: lim},
	}
	tests := []struct {
		name   string
		method string
		url    string
		host   string // if set, URL.Host is cleared and Host set, as on a server
		want   string // rule name; "" means unmatched
		noDef  string // the rule without a default rule, if it differs
	}{
		{name: "exact host", url: "https://api.example.com/x", want: "exact"},
		{name: "exact host with any port", url: "http://api.example.com:8080/x", want: "exact"},
		{name: "host case", url: "https://API.Example.COM/x", want: "exact"},
		{name: "host:port", url: "https://pay.example.com:8443/x", want: "pay8443"},
		{name: "host:port other port", url: "https://pay.example.com:9443/x", want: "wild"},
		{name: "host:port without port", url: "https://pay.example.com/x", want: "wild"},
		{name: "wildcard", url: "https://a.b.example.com/x", want: "wild"},
		{name: "wildcard not the apex", url: "https://example.com/x", want: "default", noDef: ""},
		{name: "wildcard not a suffix trick", url: "https://badexample.com/x", want: "default", noDef: ""},
		{name: "path prefix", url: "https://api.example.com/v1/things", want: "v1"},
		{name: "longest path prefix", url: "https://api.example.com/v1/users/7", want: "v1users"},
		{name: "prefix is not a segment match", url: "https://api.example.com/v1", want: "exact"},
		{name: "method", method: http.MethodPost, url: "https://api.example.com/x", want: "post"},
		{name: "prefix beats method", method: http.MethodPost, url: "https://api.example.com/v1/users", want: "v1users"},
		{name: "exact beats wildcard", url: "https://api.example.com/v2", want: "exact"},
		{name: "wildcard with prefix beats exact", url: "https://api.example.com/v1/x", want: "v1"},
		{name: "wildcard with prefix", url: "https://w.example.com/v1/x", want: "wildv1"},
		{name: "Host when URL.Host is empty", url: "https://ignored.invalid/x", host: "api.example.com:443", want: "exact"},
		{name: "other host", url: "https://other.org/x", want: "default", noDef: ""},
		{name: "a port beats any port", url: "https://ports.example.com:443/x", want: "port443"},
		{name: "the scheme's port counts", url: "https://ports.example.com/x", want: "port443"},
		{name: "another port falls back to any port", url: "http://ports.example.com/x", want: "anyport"},
	}
	build := func(t *testing.T, withDefault bool) (*throttle.Transport, *decisionLog, *sendLog) {
		var sent sendLog
		var decisions decisionLog
		opts := []throttle.Option{decisions.option()}
		for _, r := range rules {
			opts = append(opts, throttle.WithRule(r))
		}
		if withDefault {
			opts = append(opts, throttle.WithDefault(throttle.Rule{Limits: lim}))
		} else {
			opts = append(opts, throttle.WithUnmatchedSent(false)) // see the request the rules miss
		}
		return newTransport(t, sent.base(), nil, opts...), &decisions, &sent
	}
	for _, tc := range tests {
		for _, withDefault := range []bool{true, false} {
			name := tc.name + "/with default"
			want := tc.want
			if !withDefault {
				name = tc.name + "/without default"
				if want == "default" {
					want = tc.noDef
				}
			}
			t.Run(name, func(t *testing.T) {
				tr, decisions, sent := build(t, withDefault)
				method := tc.method
				if method == "" {
					method = http.MethodGet
				}
				req, _ := newRequest(t, context.Background(), method, tc.url)
				if tc.host != "" {
					req.URL.Host, req.Host = "", tc.host
				}
				_, err := tr.RoundTrip(req)
				require.NoError(t, err)
				assert.Equal(t, 1, sent.count())
				d := decisions.last(t)
				assert.Equal(t, want, d.Rule)
				if want == "" {
					assert.Equal(t, throttle.Unmatched, d.Outcome)
					assert.Empty(t, d.Key)
				} else {
					assert.Equal(t, throttle.Sent, d.Outcome)
				}
			})
		}
	}
}

// TestAlgorithmRule checks that a rule's Algorithm reaches the store: a
// fixed window admits 2N across its edge where the log refuses.
func TestAlgorithmRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		alg  throttle.Algorithm
		sent int
	}{{throttle.SlidingLog, 2}, {throttle.FixedWindow, 4}} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0).Add(900 * time.Millisecond)
			var mu sync.Mutex
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			st, err := store.NewMemory(store.WithClock(clock))
			require.NoError(t, err)
			var sent sendLog
			tr := newTransport(t, sent.base(), st, throttle.WithRule(throttle.Rule{
				Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(2)},
				Margin: throttle.NoMargin, FailFast: true, Algorithm: tc.alg,
			}))
			try := func() {
				req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
				if resp, err := tr.RoundTrip(req); err == nil {
					resp.Body.Close()
				} else {
					require.ErrorIs(t, err, throttle.ErrLimited)
				}
			}
			try()
			try()
			mu.Lock()
			now = now.Add(100 * time.Millisecond) // a new aligned second
			mu.Unlock()
			try()
			try()
			assert.Equal(t, tc.sent, sent.count())
		})
	}
}

// TestConfigErrorNamesRule checks that rule errors carry the rule's name.
func TestConfigErrorNamesRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opt  throttle.Option
		want string
	}{
		{name: "explicit name", opt: throttle.WithRule(throttle.Rule{Name: "gw", Host: "a.example.com"}), want: "gw"},
		{name: "derived name", opt: throttle.WithRule(throttle.Rule{Host: "a.example.com", Method: "POST", PathPrefix: "/v1"}), want: "POST a.example.com/v1"},
		{name: "default", opt: throttle.WithDefault(throttle.Rule{}), want: "default"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := throttle.New(nil, newMemory(t), tc.opt)
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.want, ce.Rule)
		})
	}
}

// TestRulesOfOneNameAgree: rules of one name share their keys in the store,
// so New refuses them unless they count alike: the same limits with their
// margin and default pace, algorithm, Also, InFlight and LeaseFor. What only
// one request sees (Host, FailFast) may differ.
func TestRulesOfOneNameAgree(t *testing.T) {
	t.Parallel()
	lim := []throttle.Limit{throttle.PerSecond(10)}
	app := []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("app"), Limits: []throttle.Limit{throttle.PerMinute(100)}}}
	base := throttle.Rule{Name: "gw", Host: "a.example", Limits: lim, Also: app, InFlight: 4}
	tests := []struct {
		name  string
		other func(r *throttle.Rule)
		def   bool   // the second rule is the default rule, the first named "default"
		want  string // a fragment of the error; "" means valid
	}{
		{name: "valid, other host and mode", other: func(r *throttle.Rule) {
			r.Host, r.FailFast = "b.example", true
		}},
		{name: "other limits", other: func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.PerSecond(11)} },
			want: "must have the same Limits, Margin and Algorithm"},
		{name: "other margin", other: func(r *throttle.Rule) { r.Margin = throttle.NoMargin },
			want: "must have the same Limits, Margin and Algorithm"},
		{name: "no default pace", other: func(r *throttle.Rule) { r.NoDefaultPace = true },
			want: "must have the same Limits, Margin and Algorithm"},
		{name: "other algorithm", other: func(r *throttle.Rule) { r.Algorithm, r.Also = throttle.FixedWindow, nil },
			want: "must have the same Limits, Margin and Algorithm"},
		{name: "no Also", other: func(r *throttle.Rule) { r.Also = nil }, want: "must have the same Also"},
		{name: "other Also limits", other: func(r *throttle.Rule) {
			r.Also = []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("app"), Limits: []throttle.Limit{throttle.PerMinute(99)}}}
		}, want: "must have the same Also"},
		{name: "Also with a HashTag", other: func(r *throttle.Rule) {
			r.Also = []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("app"), Limits: app[0].Limits, HashTag: true}}
		}, want: "must have the same Also"},
		{name: "other InFlight", other: func(r *throttle.Rule) { r.InFlight = 5 }, want: "must have the same InFlight and LeaseFor"},
		{name: "other LeaseFor", other: func(r *throttle.Rule) { r.LeaseFor = time.Minute }, want: "must have the same InFlight and LeaseFor"},
		{name: "default rule and a rule named default", def: true, other: func(r *throttle.Rule) { r.InFlight = 0 },
			want: "must have the same InFlight and LeaseFor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first, second := base, base
			second.Host = "b.example"
			tc.other(&second)
			opts := []throttle.Option{throttle.WithRule(first), throttle.WithRule(second)}
			if tc.def {
				first.Name = "default"
				second.Name, second.Host = "", ""
				opts = []throttle.Option{throttle.WithRule(first), throttle.WithDefault(second)}
			}
			_, err := throttle.New(nil, newMemory(t), opts...)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, first.Name, ce.Rule)
			assert.Contains(t, ce.Reason, tc.want)
		})
	}
}

// TestRulesKeepTheirOwnLogs: two rules whose KeyFuncs derive the same key (the
// default ByHost on two paths of one host) count separately, and the short
// window of one never trims the long window of the other; rules of the same
// name share one log on purpose.
func TestRulesKeepTheirOwnLogs(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		tr := newTransport(t, sent.base(), nil,
			throttle.WithRule(throttle.Rule{Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(3)}, FailFast: true}),
			throttle.WithRule(throttle.Rule{Host: "api.example.com", PathPrefix: "/search", Limits: []throttle.Limit{throttle.PerSecond(1)}, FailFast: true}),
			throttle.WithRule(throttle.Rule{Name: "shared", Host: "a.example", Key: throttle.Fixed("acct"), Limits: []throttle.Limit{throttle.PerHour(1)}, FailFast: true}),
			throttle.WithRule(throttle.Rule{Name: "shared", Host: "b.example", Key: throttle.Fixed("acct"), Limits: []throttle.Limit{throttle.PerHour(1)}, FailFast: true}),
		)
		get := func(url string) error {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		for i := range 10 {
			assert.NoError(t, get("https://api.example.com/search?q=1"), "search %d", i)
			if i < 3 {
				assert.NoError(t, get("https://api.example.com/items"), "items %d", i)
			}
			time.Sleep(time.Second + throttle.DefaultMargin)
		}
		assert.ErrorIs(t, get("https://api.example.com/items"), throttle.ErrLimited,
			"the hourly rule's log outlives the secondly rule's traffic on the same host")
		assert.NoError(t, get("https://a.example/x"))
		assert.ErrorIs(t, get("https://b.example/x"), throttle.ErrLimited, "rules named alike share one log")
	})
}

// TestIPv6Hosts: a literal IPv6 host is one key with or without its port, and
// a rule for it matches either way.
func TestIPv6Hosts(t *testing.T) {
	t.Parallel()
	kf := throttle.ByHost()
	for _, u := range []string{"https://[2001:DB8::1]/x", "https://[2001:db8::1]:443/x", "http://[2001:db8::1]:8080/"} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		k, err := kf(req)
		require.NoError(t, err)
		assert.Equal(t, "host:2001:db8::1", k, u)
	}
	var sent sendLog
	tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
		Host: "[2001:db8::1]", Limits: []throttle.Limit{throttle.PerHour(1)}, FailFast: true}))
	var errs []error
	for _, u := range []string{"https://[2001:db8::1]/x", "https://[2001:db8::1]:443/x", "https://[2001:db8::1]/y"} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		errs = append(errs, err)
	}
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], throttle.ErrLimited)
	assert.ErrorIs(t, errs[2], throttle.ErrLimited)
	assert.Equal(t, 1, sent.count())
}
