package profiles_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/profiles"
	"github.com/throttle-go/throttle/store"
)

// Every profile is a rule New accepts, alone and all together, and a
// request to its API is matched by it.
func TestProfilesBuild(t *testing.T) {
	t.Parallel()
	all := map[string]struct {
		rule throttle.Rule
		url  string
		hdr  [2]string
	}{
		"github":        {profiles.GitHub(), "https://api.github.com/repos/a/b", [2]string{"Authorization", "Bearer t"}},
		"github-search": {profiles.GitHubSearch(), "https://api.github.com/search/code?q=x", [2]string{"Authorization", "Bearer t"}},
		"stripe":        {profiles.Stripe(), "https://api.stripe.com/v1/charges", [2]string{"Authorization", "Bearer sk_live_x"}},
		"shopify":       {profiles.Shopify(profiles.ShopifyPlus), "https://shop.myshopify.com/admin/api/2026-01/orders.json", [2]string{"X-Shopify-Access-Token", "t"}},
		"slack":         {profiles.Slack(3), "https://slack.com/api/chat.postMessage", [2]string{"Authorization", "Bearer xoxb"}},
		"discord":       {profiles.Discord(), "https://discord.com/api/v10/channels/1/messages", [2]string{"Authorization", "Bot t"}},
		"reddit":        {profiles.Reddit(), "https://oauth.reddit.com/r/golang/hot", [2]string{"Authorization", "Bearer t"}},
		"salesforce":    {profiles.Salesforce(100000), "https://acme.my.salesforce.com/services/data/v62.0/sobjects", [2]string{"Authorization", "Bearer t"}},
		"hubspot":       {profiles.HubSpot(), "https://api.hubapi.com/crm/v3/objects/contacts", [2]string{"Authorization", "Bearer t"}},
		"google-maps":   {profiles.GoogleMaps(3000, 25000), "https://maps.googleapis.com/maps/api/geocode/json?key=k&address=x", [2]string{}},
		"meta":          {profiles.Meta(200), "https://graph.facebook.com/v19.0/me?access_token=t", [2]string{}},
		"openai":        {profiles.OpenAI(500, 40000), "https://api.openai.com/v1/models", [2]string{"Authorization", "Bearer sk-t"}},
		"anthropic":     {profiles.Anthropic(50, 40000, 8000), "https://api.anthropic.com/v1/models", [2]string{"X-Api-Key", "sk-ant"}},
		"x":             {profiles.X(900, 0), "https://api.x.com/2/tweets/1460323737035677698", [2]string{"Authorization", "Bearer app"}},
		"zendesk":       {profiles.Zendesk(700), "https://acme.zendesk.com/api/v2/tickets.json", [2]string{"Authorization", "Basic dTp0"}},
		"aws":           {profiles.AWS(100, 20), "https://ec2.us-east-1.amazonaws.com/?Action=DescribeHosts&Version=2016-11-15", [2]string{"Authorization", awsAuth}},
	}
	var opts []throttle.Option
	for name, p := range all {
		assert.Equal(t, name, p.rule.Name)
		opts = append(opts, throttle.WithRule(p.rule))
	}
	var decided atomic.Value
	opts = append(opts, throttle.WithOnDecision(func(d throttle.Decision) { decided.Store(d.Rule) }))
	ok := func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
	}
	tr, err := throttle.New(rtf(ok), memory(t), opts...)
	require.NoError(t, err)
	for name, p := range all {
		req, err := http.NewRequest(http.MethodGet, p.url, nil)
		require.NoError(t, err)
		if p.hdr[0] != "" {
			req.Header.Set(p.hdr[0], p.hdr[1])
		}
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, name)
		_ = resp.Body.Close()
		assert.Equal(t, name, decided.Load(), "matched by its profile")
	}
}

// A profile's refusals are heard: GitHub's 403 with remaining 0 pauses the
// token until the reset, Google's 200 OVER_QUERY_LIMIT pauses the key, and
// Stripe's 429 lock_timeout does not.
func TestProfileRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		rule  throttle.Rule
		url   string
		first *http.Response
		pause time.Duration
		auth  string // the Authorization header; empty: a bearer token
	}{
		{"GitHub 403", profiles.GitHub(), "https://api.github.com/user",
			&http.Response{StatusCode: 403, Header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"30"}}}, 30 * time.Second, ""},
		{"Google 200 OVER_QUERY_LIMIT", profiles.GoogleMaps(3000, 0), "https://maps.googleapis.com/maps/api/geocode/json?key=k",
			&http.Response{StatusCode: 200, Header: http.Header{"Retry-After": {"2"}}, Body: io.NopCloser(strings.NewReader(`{"status": "OVER_QUERY_LIMIT"}`))}, 2 * time.Second, ""},
		{"Stripe 429 lock_timeout", profiles.Stripe(), "https://api.stripe.com/v1/charges/ch_1",
			&http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"5"}}, Body: io.NopCloser(strings.NewReader(`{"error":{"code":"lock_timeout"}}`))}, 0, ""},
		{"AWS 400 RequestLimitExceeded", profiles.AWS(100, 20), "https://ec2.us-east-1.amazonaws.com/?Action=DescribeHosts",
			&http.Response{StatusCode: 400, Header: http.Header{"Retry-After": {"3"}}, Body: io.NopCloser(strings.NewReader(
				`<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors></Response>`))}, 3 * time.Second, awsAuth},
		{"AWS 400 x-amzn-ErrorType", profiles.AWS(100, 20), "https://ec2.us-east-1.amazonaws.com/?Action=DescribeHosts",
			&http.Response{StatusCode: 400, Header: http.Header{"Retry-After": {"3"}, "X-Amzn-Errortype": {"ThrottlingException"}}}, 3 * time.Second, awsAuth},
		{"AWS 400 another error", profiles.AWS(100, 20), "https://ec2.us-east-1.amazonaws.com/?Action=DescribeHosts",
			&http.Response{StatusCode: 400, Header: http.Header{"Retry-After": {"3"}}, Body: io.NopCloser(strings.NewReader(
				`<Response><Errors><Error><Code>InvalidParameterValue</Code></Error></Errors></Response>`))}, 0, awsAuth},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var n atomic.Int32
				base := rtf(func(r *http.Request) (*http.Response, error) {
					if n.Add(1) == 1 {
						resp := *c.first
						if resp.Body == nil {
							resp.Body = http.NoBody
						}
						resp.Request = r
						return &resp, nil
					}
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
				})
				tr, err := throttle.New(base, memory(t), throttle.WithRule(c.rule))
				require.NoError(t, err)
				get := func() {
					req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, c.url, nil)
					require.NoError(t, err)
					if c.auth == "" {
						c.auth = "Bearer tok"
					}
					req.Header.Set("Authorization", c.auth)
					resp, err := tr.RoundTrip(req)
					require.NoError(t, err)
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				get()
				start := time.Now()
				get()
				if c.pause == 0 {
					assert.Less(t, time.Since(start), time.Second, "no pause, only the rule's pace")
				} else {
					assert.Equal(t, c.pause, time.Since(start))
				}
			})
		})
	}
}

// awsAuth is a Signature Version 4 Authorization header (AWS's example key).
const awsAuth = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/us-east-1/ec2/aws4_request, SignedHeaders=host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"

type rtf func(*http.Request) (*http.Response, error)

func (f rtf) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func memory(t *testing.T) store.Store {
	st, err := store.NewMemory()
	require.NoError(t, err)
	return st
}

// GitHub's resources have budgets apart (x-ratelimit-resource: core,
// search, graphql): a search budget exhausted pauses search requests, not
// the token's core requests that GitHub() also matches.
func TestGitHubResourcesApart(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		base := rtf(func(r *http.Request) (*http.Response, error) {
			h := http.Header{"Date": {time.Now().UTC().Format(http.TimeFormat)}}
			resource := "core"
			if strings.HasPrefix(r.URL.Path, "/search") {
				resource = "search"
				h.Set("X-Ratelimit-Limit", "30")
				h.Set("X-Ratelimit-Remaining", "0")
				h.Set("X-Ratelimit-Reset", "60") // seconds from now against a clock before 2001
			}
			h.Set("X-Ratelimit-Resource", resource)
			return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
		})
		tr, err := throttle.New(base, memory(t), throttle.WithRule(profiles.GitHub()))
		require.NoError(t, err)
		get := func(path string) time.Duration {
			start := time.Now()
			req, err := http.NewRequest(http.MethodGet, "https://api.github.com"+path, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer t")
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			return time.Since(start)
		}
		get("/search/issues?q=x")
		assert.Zero(t, get("/repos/a/b"), "a core request does not wait for search's reset")
		assert.Zero(t, get("/graphql"), "nor does a GraphQL one")
		assert.Equal(t, 60*time.Second, get("/search/commits?q=y"), "a search request does")
	})
}

// TestGoogleMapsDaily: the daily quota starts afresh at midnight Pacific
// time, in summer too (PDT, UTC-7), on a fake clock.
func TestGoogleMapsDaily(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	synctest.Test(t, func(t *testing.T) {
		base := rtf(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		tr, err := throttle.New(base, memory(t), throttle.WithRule(profiles.GoogleMaps(3000, 2)))
		require.NoError(t, err)
		get := func(key string) error {
			req, err := http.NewRequest(http.MethodGet, "https://maps.googleapis.com/maps/api/geocode/json?key="+key, nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}
		time.Sleep(time.Until(time.Date(2000, 7, 1, 23, 0, 0, 0, la)))
		require.NoError(t, get("a"))
		require.NoError(t, get("a"))
		require.ErrorIs(t, get("a"), throttle.ErrLimited, "a third on July 1")
		require.NoError(t, get("b"), "each API key has its own day")
		time.Sleep(time.Until(time.Date(2000, 7, 2, 0, 0, 1, 0, la)))
		require.NoError(t, get("a"), "July 2 from its midnight in Los Angeles")
	})
}
