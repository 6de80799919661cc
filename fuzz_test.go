package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

// The fuzzers drive each KeyFunc through a Transport, as requests would, and
// check that whatever the input (huge, empty, not UTF-8, full of separators)
// the request is either sent under a key of bounded length or refused with a
// *KeyError, and that nothing panics. Their seeds, and the corpus committed
// under testdata/fuzz/, run with the ordinary tests; to fuzz:
//
//	go test -run '^$' -fuzz '^FuzzByHost$' -fuzztime 1m .

// hashedKey is the form of every key derived from a secret: a prefix and 128
// bits in hex.
var hashedKey = regexp.MustCompile(`^[0-9a-f]{32}$`)

// keyRig is one transport per fuzz target, reused across inputs.
type keyRig struct {
	tr *throttle.Transport
	mu sync.Mutex
	d  throttle.Decision
}

func newKeyRig(f testing.TB, key throttle.KeyFunc, opts ...throttle.Option) *keyRig {
	st, err := store.NewMemory()
	if err != nil {
		f.Fatal(err)
	}
	g := &keyRig{}
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil })
	opts = append([]throttle.Option{
		// Every request matches the default rule; the limit never refuses.
		throttle.WithDefault(throttle.Rule{Name: "fuzz", Key: key, FailFast: true,
			Limits: []throttle.Limit{throttle.Per(1<<30, time.Millisecond)}}),
		throttle.WithOnDecision(func(d throttle.Decision) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.d = d
		}),
	}, opts...)
	g.tr, err = throttle.New(base, st, opts...)
	if err != nil {
		f.Fatal(err)
	}
	return g
}

// check sends req and returns the key it was sent under, or "" when it was
// refused with a KeyError; anything else fails the test.
func (g *keyRig) check(t testing.TB, req *http.Request) string {
	t.Helper()
	resp, err := g.tr.RoundTrip(req)
	g.mu.Lock()
	d := g.d
	g.mu.Unlock()
	if err != nil {
		var ke *throttle.KeyError
		if !errors.As(err, &ke) || d.Outcome != throttle.Failed {
			t.Fatalf("refused without a KeyError: %v (outcome %s)", err, d.Outcome)
		}
		if ke.Rule != "fuzz" || ke.Reason == "" {
			t.Fatalf("KeyError without rule or reason: %#v", ke)
		}
		return ""
	}
	resp.Body.Close()
	if d.Outcome != throttle.Sent {
		t.Fatalf("outcome %s without an error", d.Outcome)
	}
	if d.Key == "" || len(d.Key) > throttle.MaxKeyLen {
		t.Fatalf("key of %d bytes: want 1..%d", len(d.Key), throttle.MaxKeyLen)
	}
	return d.Key
}

// checkHashed checks a key derived from a secret value.
func checkHashed(t testing.TB, key, prefix, value string) {
	t.Helper()
	if key == "" {
		return
	}
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || !hashedKey.MatchString(rest) {
		t.Fatalf("key %q is not %q and 32 hex digits", key, prefix)
	}
}

func fuzzRequest(t testing.TB, u *url.URL) *http.Request {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://api.example.com/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if u != nil {
		req.URL = u
		req.Host = u.Host
	}
	return req
}

var fuzzSeeds = []string{
	"", " ", "a", "api.example.com", "API.Example.COM.", "[2001:db8::1]:443", "[::1", "a:b:c",
	"\xff\xfe\x00", "é", "\x00", "%zz", "{tag}", "a}b{c", "*", "Bearer", "Bearer ", "bearer x",
	strings.Repeat("a", throttle.MaxKeyLen), strings.Repeat("b", throttle.MaxKeyLen+1),
	strings.Repeat("é\xff", 40000),
}

func FuzzByHost(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	g := newKeyRig(f, throttle.ByHost())
	f.Fuzz(func(t *testing.T, host string) {
		key := g.check(t, fuzzRequest(t, &url.URL{Scheme: "https", Host: host, Path: "/"}))
		if key != "" && !strings.HasPrefix(key, "host:") && !strings.HasPrefix(key, "sha256:") {
			t.Fatalf("key %q", key)
		}
	})
}

func FuzzByHeader(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add("X-Api-Key", s)
		f.Add(s, "value")
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		// A KeyFunc per header name: a rig per input.
		g := newKeyRig(t, throttle.ByHeader(name))
		req := fuzzRequest(t, nil)
		req.Header[http.CanonicalHeaderKey(name)] = []string{value}
		key := g.check(t, req)
		if key == "" && value != "" {
			t.Fatalf("a header of %d bytes gave no key", len(value))
		}
		if prefix := "header:" + http.CanonicalHeaderKey(name) + ":"; len(prefix)+32 <= throttle.MaxKeyLen {
			checkHashed(t, key, prefix, value)
		} else {
			checkHashed(t, key, "sha256:", value)
		}
	})
}

func FuzzByBearerToken(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add("Bearer " + s)
		f.Add(s)
	}
	g := newKeyRig(f, throttle.ByBearerToken())
	f.Fuzz(func(t *testing.T, auth string) {
		req := fuzzRequest(t, nil)
		req.Header["Authorization"] = []string{auth}
		key := g.check(t, req)
		checkHashed(t, key, "bearer:", auth)
	})
}

func FuzzByAuthorization(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add("token " + s)
		f.Add("Digest " + s)
		f.Add(s)
	}
	g := newKeyRig(f, throttle.ByAuthorization())
	f.Fuzz(func(t *testing.T, auth string) {
		req := fuzzRequest(t, nil)
		req.Header["Authorization"] = []string{auth}
		key := g.check(t, req)
		checkHashed(t, key, "bearer:", auth)
	})
}

func FuzzByQuery(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add("access_token", "access_token="+url.QueryEscape(s))
		f.Add(s, "x=1&"+s)
	}
	f.Add("t", "t=%ff%fe%00")
	f.Add("t", "t=a;b")
	f.Fuzz(func(t *testing.T, param, rawQuery string) {
		g := newKeyRig(t, throttle.ByQuery(param))
		key := g.check(t, fuzzRequest(t, &url.URL{Scheme: "https", Host: "api.example.com", Path: "/", RawQuery: rawQuery}))
		if prefix := "query:" + param + ":"; len(prefix)+32 <= throttle.MaxKeyLen {
			checkHashed(t, key, prefix, "")
		} else {
			checkHashed(t, key, "sha256:", "")
		}
	})
}

// FuzzCustomKey covers what the transport does with any key a KeyFunc
// returns (Fixed, or the user's own): empty is refused, long is hashed; with
// a secret, every key is an HMAC.
func FuzzCustomKey(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	custom := func(r *http.Request) (string, error) { return r.Header["X-Fuzz-Key"][0], nil }
	plain := newKeyRig(f, custom)
	keyed := newKeyRig(f, custom, throttle.WithKeySecret([]byte("fuzz-secret-0123456789")))
	f.Fuzz(func(t *testing.T, key string) {
		req := fuzzRequest(t, nil)
		req.Header["X-Fuzz-Key"] = []string{key}
		got := plain.check(t, req)
		switch {
		case key == "":
			if got != "" {
				t.Fatalf("an empty key was accepted as %q", got)
			}
		case len(key) <= throttle.MaxKeyLen:
			if got != key {
				t.Fatalf("key %q stored as %q", key, got)
			}
		default:
			checkHashed(t, got, "sha256:", key)
		}
		if k := keyed.check(t, req); key != "" {
			checkHashed(t, k, "hmac:", key)
		}
	})
}
