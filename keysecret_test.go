package throttle_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

var keySecret = []byte("k3y-s3cret-0123456789abcdef-XYZ!")

// TestKeySecret: with a secret, every stored and reported key is an HMAC of
// the derived key; transports sharing the secret share their logs, and other
// secrets (or none) give other keys.
func TestKeySecret(t *testing.T) {
	t.Parallel()
	rule := throttle.Rule{Name: "tok", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)},
		Key: throttle.ByBearerToken(), FailFast: true}
	st := newMemory(t)
	keyOf := func(tr *throttle.Transport, decisions *decisionLog) (string, error) {
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err := tr.RoundTrip(req)
		return decisions.last(t).Key, err
	}
	var d1, d2, d3, d4 decisionLog
	var sent sendLog
	a := newTransport(t, sent.base(), st, throttle.WithRule(rule), d1.option(), throttle.WithKeySecret(keySecret))
	b := newTransport(t, sent.base(), st, throttle.WithRule(rule), d2.option(), throttle.WithKeySecret(append([]byte(nil), keySecret...)))
	other := newTransport(t, sent.base(), st, throttle.WithRule(rule), d3.option(), throttle.WithKeySecret([]byte("another-secret-of-32-bytes-long!")))
	plain := newTransport(t, sent.base(), st, throttle.WithRule(rule), d4.option())

	ka, err := keyOf(a, &d1)
	require.NoError(t, err)
	kb, err := keyOf(b, &d2)
	assert.ErrorIs(t, err, throttle.ErrLimited, "the same secret: the same log, across transports (and processes)")
	assert.Equal(t, ka, kb)
	ko, err := keyOf(other, &d3)
	assert.NoError(t, err, "another secret: another log")
	kp, err := keyOf(plain, &d4)
	assert.NoError(t, err)

	// The key is HMAC-SHA256(secret, the KeyFunc's key), 128 bits in hex.
	derived, err := throttle.ByBearerToken()(keyReq(t, "https://api.example.com", "Authorization", "Bearer "+secret))
	require.NoError(t, err)
	assert.Equal(t, derived, kp)
	m := hmac.New(sha256.New, keySecret)
	m.Write([]byte(derived))
	assert.Equal(t, "hmac:"+hex.EncodeToString(m.Sum(nil)[:16]), ka)
	assert.NotEqual(t, ka, ko)
	for _, k := range []string{ka, ko} {
		assert.Len(t, k, len("hmac:")+32)
		assert.NotContains(t, k, strings.TrimPrefix(derived, "bearer:"))
	}
	// Pinned: a change would split every fleet's logs during a deploy.
	var dp decisionLog
	pin := newTransport(t, sent.base(), nil, throttle.WithKeySecret([]byte("0123456789abcdef")), dp.option(),
		throttle.WithRule(throttle.Rule{Host: "a.example.com", Limits: rule.Limits, Key: throttle.Fixed("pg1")}))
	req, _ := newRequest(t, context.Background(), http.MethodGet, "https://a.example.com/")
	_, err = pin.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "hmac:a0fab1e674e8c797e4f6bcbd9e3a917b", dp.last(t).Key)

	// A huge key is keyed too: bounded.
	huge := newTransport(t, sent.base(), nil, throttle.WithKeySecret(keySecret), d1.option(),
		throttle.WithRule(throttle.Rule{Host: "a.example.com", Limits: rule.Limits, Key: throttle.Fixed(strings.Repeat("x", 1<<20))}))
	req, _ = newRequest(t, context.Background(), http.MethodGet, "https://a.example.com/")
	_, err = huge.RoundTrip(req)
	require.NoError(t, err)
	assert.Len(t, d1.last(t).Key, len("hmac:")+32)
}

// TestNoSecretAnywhere drives every path a request can take (sent, limited,
// no key, invalid cost, canceled before and while waiting, limited by its
// deadline, store failure under each policy, tried and not tried, local
// sends and refusals, unmatched) with a token in the Authorization header,
// in an API-key header and in the query string, through transports keyed
// with a secret, and looks for the token, the secret and the token's unkeyed
// hash in every error, every Decision printed with %+v, and every log line
// (text and JSON). The only place a token appears is the URL in net/http's
// *url.Error, which the test checks is the URL of the request, unchanged.
func TestNoSecretAnywhere(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		text := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		var jsonLogs bytes.Buffer
		jsonl := slog.New(slog.NewJSONHandler(&jsonLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		var decisions decisionLog
		var sent sendLog
		lim := []throttle.Limit{throttle.Per(1, time.Second)}
		rules := func(prefix string) []throttle.Option {
			return []throttle.Option{
				throttle.WithRule(throttle.Rule{Name: prefix + "bearer", Host: "api.example.com", Limits: lim, Key: throttle.ByBearerToken()}),
				throttle.WithRule(throttle.Rule{Name: prefix + "query", Host: "graph.example.com", Limits: lim, Key: throttle.ByQuery("access_token"), FailFast: true}),
				throttle.WithRule(throttle.Rule{Name: prefix + "header", Host: "h.example.com", Limits: lim, Key: throttle.ByHeader("X-Api-Key")}),
				throttle.WithRule(throttle.Rule{Name: prefix + "cost", Host: "cost.example.com", Limits: lim, Cost: func(*http.Request) int { return 5 }}),
			}
		}
		common := []throttle.Option{decisions.option(), throttle.WithKeySecret(keySecret)}
		mk := func(st store.Store, logger *slog.Logger, extra ...throttle.Option) *throttle.Transport {
			opts := append(append(append([]throttle.Option{throttle.WithLogger(logger)}, common...), rules("")...), extra...)
			return newTransport(t, sent.base(), st, opts...)
		}
		down := failingStore(errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"))
		transports := map[string]*throttle.Transport{
			"memory":      mk(nil, text),
			"memory-json": mk(nil, jsonl),
			"closed":      mk(down, text),
			"open":        mk(down, jsonl, throttle.WithFailOpen()),
			"local":       mk(down, text, throttle.WithFailLocal(1)),
		}

		var errs []error
		do := func(tr *throttle.Transport, ctx context.Context, rawURL string, mutate func(*http.Request)) {
			req, _ := newRequest(t, ctx, http.MethodGet, rawURL)
			req.Header.Set("X-Api-Key", secret)
			if mutate != nil {
				mutate(req)
			}
			if _, err := tr.RoundTrip(req); err != nil {
				errs = append(errs, err)
			}
			// And through http.Client: the error is a *url.Error.
			req, _ = newRequest(t, ctx, http.MethodGet, rawURL)
			req.Header.Set("X-Api-Key", secret)
			if mutate != nil {
				mutate(req)
			}
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err == nil {
				resp.Body.Close()
				return
			}
			var ue *url.Error
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, req.URL.String(), ue.URL, "net/http puts the request's URL, with its query, in the error")
			errs = append(errs, ue.Err) // what throttle contributes
		}
		q := "?access_token=" + secret
		bg := context.Background()
		for _, name := range []string{"memory", "memory-json", "closed", "open", "local"} {
			tr := transports[name]
			do(tr, bg, "https://api.example.com/a"+q, nil)                    // sent (or store failure)
			do(tr, bg, "https://graph.example.com/a"+q, nil)                  // limited, fail fast
			do(tr, bg, "https://h.example.com/a"+q, nil)                      // sent
			do(tr, bg, "https://cost.example.com/a"+q, nil)                   // invalid cost
			do(tr, bg, "https://other.example.com/a"+q, nil)                  // unmatched
			do(tr, bg, "https://api.example.com/a"+q, func(r *http.Request) { // no key: not bearer
				r.Header.Set("Authorization", "Basic "+secret)
			})
			do(tr, bg, "https://h.example.com/a"+q, func(r *http.Request) { r.Header.Del("X-Api-Key") }) // no key
			ctx, cancel := context.WithCancel(bg)
			cancel()
			do(tr, ctx, "https://api.example.com/a"+q, nil) // canceled before
			ctx, cancel = context.WithCancel(bg)
			timer := time.AfterFunc(100*time.Millisecond, cancel)
			do(tr, ctx, "https://api.example.com/a"+q, nil) // canceled while waiting
			timer.Stop()
			ctx, cancel = context.WithTimeout(bg, 10*time.Millisecond)
			do(tr, ctx, "https://api.example.com/a"+q, nil) // limited by the deadline
			cancel()
			time.Sleep(2 * time.Second) // the store is probed again; windows empty
		}

		// What must never appear: the token, the secret (raw and hex), and
		// the token's unkeyed hash, which a secret exists to hide.
		unkeyed, err := throttle.ByBearerToken()(keyReq(t, "https://api.example.com", "Authorization", "Bearer "+secret))
		require.NoError(t, err)
		forbidden := []string{secret, "tok-", string(keySecret), hex.EncodeToString(keySecret), strings.TrimPrefix(unkeyed, "bearer:")}
		check := func(what, s string) {
			t.Helper()
			for _, f := range forbidden {
				assert.NotContains(t, s, f, what)
			}
		}
		seen := map[string]int{}
		for _, d := range decisions.all() {
			k := d.Outcome.String()
			if d.Local {
				k += "+local"
			}
			seen[k]++
			check("decision", fmt.Sprintf("%+v", d))
			check("decision", fmt.Sprintf("%#v", d))
			if d.Outcome != throttle.Unmatched && d.Key != "" {
				assert.True(t, strings.HasPrefix(d.Key, "hmac:"), d.Key)
			}
		}
		for _, err := range errs {
			check("error", err.Error())
			check("error", fmt.Sprintf("%+v", err))
		}
		check("text log", logs.String())
		check("json log", jsonLogs.String())

		// Every path was taken.
		for _, want := range []string{"sent", "limited", "failed", "canceled", "unmatched", "failed_open", "sent+local", "limited+local"} {
			assert.Positive(t, seen[want], "outcome %s never happened: %v", want, seen)
		}
		var storeErrs, notTried int
		for _, err := range errs {
			var se *throttle.StoreError
			if errors.As(err, &se) {
				storeErrs++
				if se.NotTried {
					notTried++
				}
			}
		}
		assert.Positive(t, storeErrs)
		assert.Positive(t, notTried)
		t.Logf("%d decisions %v, %d errors, %d log bytes: no token, secret or unkeyed hash in any", len(decisions.all()), seen, len(errs), logs.Len()+jsonLogs.Len())
	})
}
