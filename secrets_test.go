package throttle_test

import (
	"bytes"
	"context"
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
				throttle.WithRule(throttle.Rule{Name: prefix + "query", Host: "graph.example.com", Limits: lim, Key: throttle.ByQuery("access_token"), Mode: throttle.FailFast}),
				throttle.WithRule(throttle.Rule{Name: prefix + "header", Host: "h.example.com", Limits: lim, Key: throttle.ByHeader("X-Api-Key")}),
				throttle.WithRule(throttle.Rule{Name: prefix + "cost", Host: "cost.example.com", Limits: lim, Cost: func(*http.Request) int { return 5 }}),
			}
		}
		common := []throttle.Option{decisions.option(), throttle.WithKeySecret(keySecret)}
		mk := func(st store.Store, logger *slog.Logger, extra ...throttle.Option) *throttle.Transport {
			opts := append(append(append([]throttle.Option{throttle.WithLogger(logger)}, common...), rules("")...), extra...)
			return newTransport(t, sent.base(), st, opts...)
		}
		down := errStore{errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")}
		transports := map[string]*throttle.Transport{
			"memory":      mk(nil, text),
			"memory-json": mk(nil, jsonl),
			"closed":      mk(down, text),
			"open":        mk(down, jsonl, throttle.WithStoreFailure(throttle.FailOpen)),
			"local":       mk(down, text, throttle.WithStoreFailure(throttle.FailLocal), throttle.WithLocalShare(1)),
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
