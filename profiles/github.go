package profiles

import (
	"net/http"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
)

// githubRefusals are GitHub's refusals beyond a 429: a 403 with
// x-ratelimit-remaining: 0 (the primary limit) or with retry-after (a
// secondary limit).
var githubRefusals = []throttle.Refusal{
	{Status: 403, Header: "X-RateLimit-Remaining", Value: "0"},
	{Status: 403, Header: "Retry-After"},
}

// GitHub returns the rule of GitHub's REST API (api.github.com) for a
// token: 5,000 requests per hour (a fixed window that GitHub resets at the
// epoch it sends, so the rule sends without a default pace), 900 points per
// minute (the secondary limit: a GET, HEAD or OPTIONS request costs 1 point,
// any other method 5), and 100 requests in flight at once.
// A 403 with x-ratelimit-remaining: 0 or with retry-after is a refusal.
// Each of GitHub's resources (x-ratelimit-resource) is a key of its own:
// search, code search and GraphQL requests count apart from the core
// ones, so that one's budget never pauses another's; use GitHubSearch for
// /search's own limit. Documented at
// docs.github.com, "Rate limits for the REST API", as of 2026-05.
func GitHub() throttle.Rule {
	return throttle.Rule{
		Name:          "github",
		Host:          "api.github.com",
		Key:           githubKey(throttle.ByAuthorization()),
		Limits:        []throttle.Limit{throttle.PerHour(5000), throttle.PerMinute(900).Of("points")},
		Costs:         map[string]func(*http.Request) int{"points": githubPoints},
		NoDefaultPace: true,
		InFlight:      100,
		Refused:       githubRefusals,
		MaxServerWait: time.Minute,
	}
}

// GitHubSearch returns the rule of GitHub's search API (api.github.com,
// /search): 30 requests per minute for a token, a budget apart from the
// REST API's (x-ratelimit-resource: search). Documented at docs.github.com,
// "Rate limits for the REST API" and "REST API endpoints for search", as of
// 2026-05.
func GitHubSearch() throttle.Rule {
	return throttle.Rule{
		Name:       "github-search",
		Host:       "api.github.com",
		PathPrefix: "/search",
		Key:        githubKey(throttle.ByAuthorization()),
		Limits:     []throttle.Limit{throttle.PerMinute(30)},
		Refused:    githubRefusals,
	}
}

// githubPoints is what a request costs against GitHub's secondary limit of
// points per minute: 1 for a GET, HEAD or OPTIONS request, 5 for any other
// ("Rate limits for the REST API", docs.github.com, as of 2026-05).
func githubPoints(req *http.Request) int {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		return 1
	}
	return 5
}

// githubKey keys a request as key does, followed by the resource GitHub
// counts it against when that is not core ("Rate limits for the REST
// API", docs.github.com, as of 2026-05): code_search for /search/code,
// search for the rest of /search, graphql for /graphql. What a response
// states of one resource's budget (x-ratelimit-resource) then never
// pauses another's. The secondary limits (points, requests in flight)
// count per resource too: GraphQL's points are GitHub's apart.
func githubKey(key throttle.KeyFunc) throttle.KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		if err != nil {
			return k, err
		}
		switch p := r.URL.Path; {
		case p == "/search/code" || strings.HasPrefix(p, "/search/code/"):
			return k + ":code_search", nil
		case p == "/search" || strings.HasPrefix(p, "/search/"):
			return k + ":search", nil
		case p == "/graphql" || strings.HasPrefix(p, "/graphql/"):
			return k + ":graphql", nil
		}
		return k, nil
	}
}
