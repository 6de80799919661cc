package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// records is a slog.Handler that keeps every record, safe for concurrent use.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append(h.list, r.Clone())
	return nil
}

// warnings returns, for every Warn record, its message and attributes as
// "msg k=v k=v".
func (h *records) warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.list {
		if r.Level != slog.LevelWarn {
			continue
		}
		s := r.Message
		r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
		out = append(out, s)
	}
	return out
}

// neverBase is a base transport that fails the test if it is called.
func neverBase(t *testing.T) http.RoundTripper {
	return roundTripperFunc(func(*http.Request) (*http.Response, error) {
		t.Error("the base transport was called")
		return nil, errors.New("unreachable")
	})
}

// TestUnmatchedRefused: by default a request that no rule matches is refused
// with an *UnmatchedError found through http.Client's *url.Error, which
// names the host (never the path or the query) and says how to fix it; the
// base is never called and the body is closed; the decision says Unmatched
// with the error, and the logger hears it at Warn.
func TestUnmatchedRefused(t *testing.T) {
	t.Parallel()
	var decisions decisionLog
	var logs records
	tr := newTransport(t, neverBase(t), nil, decisions.option(), throttle.WithLogger(slog.New(&logs)),
		throttle.WithRule(throttle.Rule{Host: "graph.instagram.com", Limits: []throttle.Limit{throttle.PerHour(200)}}))

	// The typo the option exists for: facebook for instagram, with a port.
	req, body := newRequest(t, context.Background(), http.MethodPost, "https://Graph.Facebook.com:8443/me/media?access_token="+secret)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.Error(t, err)
	assert.Nil(t, resp)
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	assert.NotErrorIs(t, err, throttle.ErrLimited)
	var me *throttle.UnmatchedError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "graph.facebook.com:8443", me.Host)
	for _, fix := range []string{`"graph.facebook.com:8443"`, "WithRule", "WithDefault", "WithUnmatchedSent"} {
		assert.Contains(t, me.Error(), fix)
	}
	assert.NotContains(t, me.Error(), secret)
	assert.NotContains(t, me.Error(), "/me/media")
	assert.Positive(t, body.closes.Load(), "the body must be closed")

	// RoundTrip itself closes the body exactly once.
	req, body = newRequest(t, context.Background(), http.MethodPost, "https://graph.facebook.com/me")
	_, err = tr.RoundTrip(req)
	require.True(t, isA[*throttle.UnmatchedError](err), "%v", err)
	assert.Equal(t, int32(1), body.closes.Load())
	assert.Zero(t, body.reads.Load())

	d := decisions.last(t)
	assert.Equal(t, throttle.Unmatched, d.Outcome)
	assert.Equal(t, err, d.Err)
	assert.Empty(t, d.Rule)
	assert.Empty(t, d.Key)
	warns := logs.warnings()
	require.Len(t, warns, 1, "a Warn line for the first refusal; the next one of the same kind is summed up later (logs.go)")
	assert.Contains(t, warns[0], "outcome=unmatched")
	assert.NotContains(t, strings.Join(warns, "\n"), secret)
}

// TestUnmatchedSent: WithUnmatchedSent(false) sends the request as it is,
// with no warning; WithUnmatchedSent(true) sends it too, with one.
func TestUnmatchedSent(t *testing.T) {
	t.Parallel()
	for _, warn := range []bool{false, true} {
		t.Run(fmt.Sprintf("warn=%v", warn), func(t *testing.T) {
			t.Parallel()
			var sent sendLog
			var logs records
			tr := newTransport(t, sent.base(), nil, throttle.WithUnmatchedSent(warn), throttle.WithLogger(slog.New(&logs)),
				throttle.WithRule(throttle.Rule{Host: "graph.instagram.com", Limits: []throttle.Limit{throttle.PerHour(200)}}))
			req, body := newRequest(t, context.Background(), http.MethodGet, "https://graph.facebook.com/me")
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, 1, sent.count())
			assert.Same(t, req, sent.reqs[0])
			assert.Zero(t, body.closes.Load(), "the body belongs to the base once it is called")
			if !warn {
				assert.Empty(t, logs.warnings())
			} else {
				assert.Len(t, logs.warnings(), 1)
			}
		})
	}
}

// TestUnmatchedWarnOncePerHost: under WithUnmatchedSent(true), many goroutines sending
// to a few unmatched hosts at once give exactly one warning per host (a
// port makes another host), naming the host and the fix, and every request
// is sent. Run with -race.
func TestUnmatchedWarnOncePerHost(t *testing.T) {
	t.Parallel()
	var sent sendLog
	var logs records
	tr := newTransport(t, sent.base(), nil, throttle.WithUnmatchedSent(true), throttle.WithLogger(slog.New(&logs)),
		throttle.WithRule(throttle.Rule{Host: "graph.instagram.com", Limits: []throttle.Limit{throttle.PerHour(200)}}))
	hosts := []string{"graph.facebook.com", "GRAPH.facebook.com:8443", "proxy.internal"}
	const perHost = 40
	var wg sync.WaitGroup
	for i := range perHost * len(hosts) {
		wg.Go(func() {
			req, _ := newRequest(t, context.Background(), http.MethodGet, "https://"+hosts[i%len(hosts)]+"/x?access_token="+secret)
			resp, err := tr.RoundTrip(req)
			if assert.NoError(t, err) {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, perHost*len(hosts), sent.count(), "every unmatched request is sent")

	// The decisions are logged at Debug; the warnings are the rest.
	var warned []string
	for _, w := range logs.warnings() {
		assert.True(t, strings.HasPrefix(w, "throttle: a request matches no rule and is sent without a limit"), w)
		assert.Contains(t, w, "WithDefault")
		assert.NotContains(t, w, secret)
		host, _, _ := strings.Cut(strings.SplitAfter(w, "host=")[1], " ")
		warned = append(warned, host)
	}
	assert.ElementsMatch(t, []string{"graph.facebook.com", "graph.facebook.com:8443", "proxy.internal"}, warned)
}

// TestUnmatchedWarnBounded: WithUnmatchedSent(true) remembers at most MaxWarnedHosts
// hosts, then warns once that later hosts go unreported, and never again.
func TestUnmatchedWarnBounded(t *testing.T) {
	t.Parallel()
	var sent sendLog
	var logs records
	tr := newTransport(t, sent.base(), nil, throttle.WithUnmatchedSent(true), throttle.WithLogger(slog.New(&logs)),
		throttle.WithRule(throttle.Rule{Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(200)}}))
	n := throttle.MaxWarnedHosts + 10
	for round := range 2 {
		for i := range n {
			req, _ := newRequest(t, context.Background(), http.MethodGet, fmt.Sprintf("https://h%d.example.net/", i))
			_, err := tr.RoundTrip(req)
			require.NoError(t, err)
		}
		warns := logs.warnings()
		require.Len(t, warns, throttle.MaxWarnedHosts+1, "round %d", round)
		assert.Contains(t, warns[throttle.MaxWarnedHosts], "later hosts are not")
		assert.Contains(t, warns[throttle.MaxWarnedHosts], fmt.Sprintf("host=h%d.example.net", throttle.MaxWarnedHosts))
	}
	assert.Equal(t, 2*n, sent.count())
}

// TestUnmatchedWarnWithoutLogger: with no WithLogger, WithUnmatchedSent(true)
// warns to slog.Default(), since the user asked to hear of unmatched hosts.
// It sets the default logger, so it does not run in parallel.
func TestUnmatchedWarnWithoutLogger(t *testing.T) {
	var logs records
	old := slog.Default()
	slog.SetDefault(slog.New(&logs))
	defer slog.SetDefault(old)

	var sent sendLog
	tr := newTransport(t, sent.base(), nil, throttle.WithUnmatchedSent(true),
		throttle.WithRule(throttle.Rule{Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(200)}}))
	for range 3 {
		send(t, tr, "https://other.example.com/")
	}
	warns := logs.warnings()
	require.Len(t, warns, 1)
	assert.Contains(t, warns[0], "host=other.example.com")
}
