package throttle_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// These tests show how to compose the Transport with other RoundTrippers:
// one that adds the Authorization header (as golang.org/x/oauth2's Transport
// does) and a retry loop. Both go outside the throttle, which wraps the
// network transport: the throttle must see what the upstream will see, once
// per request the upstream will receive.

// addToken is the smallest oauth2.Transport: it sends a clone of the request
// with the Authorization header set, as oauth2 does (never mutating the
// caller's request).
type addToken struct {
	token string
	base  http.RoundTripper
}

func (a addToken) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "token "+a.token) // GitHub's classic scheme
	return a.base.RoundTrip(r)
}

// retry sends a request up to tries times while the answer is a 5xx, each
// time as a new request through its base, as retrying clients do.
type retry struct {
	tries int
	base  http.RoundTripper
}

func (rt retry) RoundTrip(req *http.Request) (*http.Response, error) {
	var resp *http.Response
	var err error
	for range rt.tries {
		resp, err = rt.base.RoundTrip(req.Clone(req.Context()))
		if err != nil || resp.StatusCode < 500 {
			return resp, err
		}
		resp.Body.Close()
	}
	return resp, err
}

// upstream is a fake network transport that answers the statuses in turn (200
// when they run out) and records the Authorization header of what it got.
type upstream struct {
	mu       sync.Mutex
	statuses []int
	auth     []string
}

func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.auth = append(u.auth, req.Header.Get("Authorization"))
	resp := okResponse(req)
	if len(u.statuses) > 0 {
		resp.StatusCode, u.statuses = u.statuses[0], u.statuses[1:]
	}
	return resp, nil
}

func (u *upstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

// githubRule allows one request per token per hour, and refuses at once.
var githubRule = throttle.Rule{Name: "github", Host: "api.github.com", Limits: []throttle.Limit{throttle.PerHour(1)},
	Key: throttle.ByAuthorization(), FailFast: true}

func getThrough(t *testing.T, c *http.Client) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://api.github.com/user", nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

// TestComposeTokenTransport: the transport that adds the token wraps the
// throttle (oauth2.Transport{Base: throttleTransport}), so that the throttle
// keys each request by the token it carries: one log per token. The other
// way round the throttle sees no Authorization header and refuses every
// request with a *KeyError that says which way to compose.
func TestComposeTokenTransport(t *testing.T) {
	t.Parallel()
	t.Run("token transport outside: one log per token", func(t *testing.T) {
		t.Parallel()
		var up upstream
		var decisions decisionLog
		tr := newTransport(t, &up, nil, throttle.WithRule(githubRule), decisions.option())
		alice := &http.Client{Transport: addToken{token: "ghp_alice", base: tr}}
		bob := &http.Client{Transport: addToken{token: "ghp_bob", base: tr}}

		_, err := getThrough(t, alice)
		require.NoError(t, err)
		_, err = getThrough(t, alice)
		assert.ErrorIs(t, err, throttle.ErrLimited, "alice's token has spent its hour")
		_, err = getThrough(t, bob)
		require.NoError(t, err, "bob's token has its own log")

		assert.Equal(t, []string{"token ghp_alice", "token ghp_bob"}, up.received())
		keys := map[string]bool{}
		for _, d := range decisions.all() {
			keys[d.Key] = true
			assert.NotContains(t, d.Key, "ghp_")
		}
		assert.Len(t, keys, 2, "two tokens, two keys")
	})
	t.Run("token transport inside: refused, saying why", func(t *testing.T) {
		t.Parallel()
		var up upstream
		tr := newTransport(t, addToken{token: "ghp_alice", base: &up}, nil, throttle.WithRule(githubRule))
		_, err := getThrough(t, &http.Client{Transport: tr})
		require.Error(t, err)
		var ue *url.Error
		require.ErrorAs(t, err, &ue)
		var ke *throttle.KeyError
		require.ErrorAs(t, err, &ke)
		assert.Equal(t, "github", ke.Rule)
		assert.Contains(t, ke.Reason, "no Authorization header")
		assert.Contains(t, ke.Reason, "must wrap the throttle's Transport")
		assert.Empty(t, up.received(), "nothing is sent")
	})
}

// TestComposeRetry: a retry loop goes outside the throttle, so that each
// retry, a new request to the upstream, is throttled again: under a limit of
// 2 per hour the third try is refused and the upstream receives 2. The
// other way round one admission covers every try, and the upstream receives
// 3 under a limit of 2.
func TestComposeRetry(t *testing.T) {
	t.Parallel()
	rule := throttle.Rule{Host: "api.github.com", Limits: []throttle.Limit{throttle.PerHour(2)}, Key: throttle.Fixed("gh"),
		FailFast: true}
	failing := func() *upstream { return &upstream{statuses: []int{http.StatusBadGateway, http.StatusBadGateway}} }

	t.Run("retry outside: each try throttled", func(t *testing.T) {
		t.Parallel()
		up := failing()
		var decisions decisionLog
		tr := newTransport(t, up, nil, throttle.WithRule(rule), decisions.option())
		_, err := getThrough(t, &http.Client{Transport: retry{tries: 3, base: tr}})
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le, "the third try is refused")
		assert.Len(t, up.received(), 2, "the upstream receives what the limit allows")
		var outcomes []throttle.Outcome
		for _, d := range decisions.all() {
			outcomes = append(outcomes, d.Outcome)
		}
		assert.Equal(t, []throttle.Outcome{throttle.Sent, throttle.Sent, throttle.Limited}, outcomes)
	})
	t.Run("retry inside: the limit is exceeded", func(t *testing.T) {
		t.Parallel()
		up := failing()
		var decisions decisionLog
		tr := newTransport(t, retry{tries: 3, base: up}, nil, throttle.WithRule(rule), decisions.option())
		resp, err := getThrough(t, &http.Client{Transport: tr})
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Len(t, decisions.all(), 1, "one admission...")
		assert.Len(t, up.received(), 3, "...for three sends: over the limit of 2")
	})
}
