package throttle_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestHooksAndLogsHoldNoSecret drives every outcome through a transport with
// a decision hook and a logger, and checks that neither, nor any error, holds
// the token the requests carry.
func TestHooksAndLogsHoldNoSecret(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		var decisions decisionLog
		var sent sendLog
		lim := []throttle.Limit{throttle.Per(1, time.Second)}
		tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithLogger(logger),
			throttle.WithRule(throttle.Rule{Name: "bearer", Host: "api.example.com", Limits: lim, Key: throttle.ByBearerToken()}),
			throttle.WithRule(throttle.Rule{Name: "query", Host: "graph.example.com", Limits: lim, Key: throttle.ByQuery("access_token"),
				FailFast: true}),
			throttle.WithRule(throttle.Rule{Name: "header", Host: "h.example.com", Limits: lim, Key: throttle.ByHeader("X-Api-Key")}),
			throttle.WithRule(throttle.Rule{Name: "long", Host: "long.example.com", Limits: lim,
				Key: func(r *http.Request) (string, error) {
					return strings.Repeat("k", throttle.MaxKeyLen) + r.Header.Get("Authorization"), nil
				}}),
			throttle.WithRule(throttle.Rule{Name: "cost", Host: "cost.example.com", Limits: lim,
				Cost: func(*http.Request) int { return 2 }}),
		)
		var errs []error
		do := func(ctx context.Context, method, rawURL string, mutate func(*http.Request)) {
			req, _ := newRequest(t, ctx, method, rawURL)
			req.Header.Set("X-Api-Key", secret)
			if mutate != nil {
				mutate(req)
			}
			if _, err := tr.RoundTrip(req); err != nil {
				errs = append(errs, err)
			}
		}
		q := "?access_token=" + secret
		bg := context.Background()
		do(bg, "GET", "https://api.example.com/a"+q, nil)                    // sent
		do(bg, "GET", "https://graph.example.com/a"+q, nil)                  // sent
		do(bg, "GET", "https://graph.example.com/a"+q, nil)                  // limited
		do(bg, "GET", "https://h.example.com/a"+q, nil)                      // sent
		do(bg, "GET", "https://long.example.com/a"+q, nil)                   // sent, hashed key
		do(bg, "GET", "https://cost.example.com/a"+q, nil)                   // invalid cost
		do(bg, "GET", "https://other.example.com/a"+q, nil)                  // unmatched: refused
		do(bg, "GET", "https://api.example.com/a"+q, func(r *http.Request) { // no key: not bearer
			r.Header.Set("Authorization", "Basic "+secret)
		})
		do(bg, "GET", "https://h.example.com/a"+q, func(r *http.Request) { r.Header.Del("X-Api-Key") }) // no key
		ctx, cancel := context.WithCancel(bg)
		timer := time.AfterFunc(100*time.Millisecond, cancel)
		do(ctx, "GET", "https://api.example.com/a"+q, nil) // canceled while waiting
		timer.Stop()
		ctx, cancel = context.WithTimeout(bg, 10*time.Millisecond)
		do(ctx, "GET", "https://api.example.com/a"+q, nil) // limited by the deadline
		cancel()

		failing := newTransport(t, sent.base(), failingStore(errors.New("store down")), decisions.option(), throttle.WithLogger(logger),
			throttle.WithRule(throttle.Rule{Name: "fo", Host: "api.example.com", Limits: lim, Key: throttle.ByBearerToken()}),
			throttle.WithFailOpen())
		req, _ := newRequest(t, bg, "GET", "https://api.example.com/a"+q)
		_, err := failing.RoundTrip(req)
		require.NoError(t, err) // failed open

		all := decisions.all()
		seen := map[throttle.Outcome]int{}
		for _, d := range all {
			seen[d.Outcome]++
			assert.NotContains(t, d.Key, secret)
			assert.NotContains(t, d.Rule, secret)
			if d.Err != nil {
				assert.NotContains(t, d.Err.Error(), secret)
			}
			if d.Outcome != throttle.Unmatched {
				assert.NotEmpty(t, d.Rule)
			}
		}
		assert.Equal(t, map[throttle.Outcome]int{
			throttle.Sent: 4, throttle.Limited: 2, throttle.Canceled: 1,
			throttle.Failed: 3, throttle.FailedOpen: 1, throttle.Unmatched: 1,
		}, seen)
		require.Len(t, errs, 7)
		for _, err := range errs {
			assert.NotContains(t, err.Error(), secret)
		}
		out := logs.String()
		assert.NotContains(t, out, secret)
		assert.NotContains(t, out, "tok-")
		for _, want := range []string{
			"level=DEBUG msg=\"throttle decision\" rule=bearer key=bearer:",
			"outcome=sent", "outcome=limited", "outcome=canceled", "outcome=failed ",
			"outcome=failed_open", "outcome=unmatched", "retry_after=", "limit=1/1s",
			"level=INFO", "level=WARN", "key=sha256:",
		} {
			assert.Contains(t, out, want)
		}
		assert.Equal(t, len(all), strings.Count(out, "msg=\"throttle decision\""), "one line per decision")
	})
}

// TestLoggerLevel checks that a logger above Debug hears only refusals and
// failures.
func TestLoggerLevel(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var sent sendLog
	tr := newTransport(t, sent.base(), nil, throttle.WithLogger(logger), throttle.WithRule(throttle.Rule{
		Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)}, FailFast: true,
	}))
	send(t, tr, testURL)
	assert.Empty(t, logs.String())
	req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
	_, err := tr.RoundTrip(req)
	require.ErrorIs(t, err, throttle.ErrLimited)
	assert.Equal(t, 1, strings.Count(logs.String(), "\n"))
	assert.Contains(t, logs.String(), "level=INFO")
	assert.Contains(t, logs.String(), "outcome=limited")
}

// TestDecisionHookSeesEveryField checks a hook's view of one delayed send.
func TestDecisionHookSeesEveryField(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var decisions decisionLog
		var sent sendLog
		lim := throttle.Per(4, time.Second)
		tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
			Name: "gw", Host: "api.example.com", Limits: []throttle.Limit{lim}, Key: throttle.Fixed("acme"),
			Cost: func(*http.Request) int { return 2 }, Margin: throttle.NoMargin,
		}))
		send(t, tr, testURL)
		send(t, tr, testURL)
		send(t, tr, testURL)
		assert.Equal(t, []throttle.Decision{
			{Rule: "gw", Key: "acme", Cost: 2, Outcome: throttle.Sent},
			{Rule: "gw", Key: "acme", Cost: 2, Outcome: throttle.Sent},
			{Rule: "gw", Key: "acme", Cost: 2, Outcome: throttle.Sent, Delay: time.Second, Limit: lim},
		}, decisions.all())
	})
}

// TestOutcomeString checks the names of outcomes.
func TestOutcomeString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		o    throttle.Outcome
		want string
	}{
		{throttle.Sent, "sent"}, {throttle.Limited, "limited"}, {throttle.Canceled, "canceled"},
		{throttle.Failed, "failed"}, {throttle.FailedOpen, "failed_open"}, {throttle.Unmatched, "unmatched"},
		{throttle.Outcome(-1), "unknown"}, {throttle.Outcome(99), "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) { assert.Equal(t, tc.want, tc.o.String()) })
	}
}
