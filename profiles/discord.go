package profiles

import (
	"net/http"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
)

// Discord returns the rule of Discord's HTTP API (discord.com/api/) for a
// bot token: the global limit of 50 requests per second per token, and a
// key per route (its method and path, ids left out but for the major
// parameter: the id after channels, guilds or webhooks), whose bucket is
// learned from the route's first response (X-RateLimit-Limit per
// X-RateLimit-Reset-After) and kept by the whole fleet: no window of the
// bucket's length holds more than its limit. Routes that share a bucket
// (X-RateLimit-Bucket) are still keyed apart. Discord bans for an hour an IP address that gets 10,000 invalid
// responses (401, 403 or 429) in 10 minutes: the token's global key counts
// the invalid responses of all its routes (a unit, "invalid", estimated at
// 0 and settled to 1 on such a response by Actual.Status) and stops them
// at 9,500 per 10 minutes, below the ban by what may be in flight when it
// fills. The budget is per token: several tokens sent from one address
// share its ban but not their budgets (give them one Also key of the
// address for that). Documented at
// discord.com/developers/docs/topics/rate-limits, as of 2026-11.
func Discord() throttle.Rule {
	return throttle.Rule{
		Name:       "discord",
		Host:       "discord.com",
		PathPrefix: "/api/",
		Key:        discordRoute(throttle.ByAuthorization()),
		Limits:     []throttle.Limit{throttle.PerSecond(50)},
		Costs:      map[string]func(*http.Request) int{"invalid": func(*http.Request) int { return 0 }},
		Actual:     throttle.Actual{Status: discordInvalid},
		Also: []throttle.KeyLimit{{
			Name: "global",
			Key:  throttle.ByAuthorization(),
			Limits: []throttle.Limit{throttle.PerSecond(50),
				throttle.Per(discordInvalidBudget, 10*time.Minute).Of("invalid")},
		}},
	}
}

// discordInvalidBudget is how many invalid responses (401, 403, 429) a
// Discord token may get in 10 minutes, over all its routes: 5% below the 10,000 that ban the
// address, for the requests in flight when the budget fills (a request
// waits once the window holds more than the budget).
const discordInvalidBudget = 9_500

// discordInvalid counts a response of status code against the budget of
// invalid responses: 401, 403 and 429 (a 429 of the shared scope too,
// which Discord does not count: the status alone cannot tell).
func discordInvalid(code int) (map[string]int, bool) {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests:
		return map[string]int{"invalid": 1}, true
	}
	return nil, false
}

// discordRoute keys a request as key does, followed by its route: the
// method and the path after the API's version, each all-digit segment
// (an id) replaced by "{id}" but for the first major parameter, which
// Discord counts apart.
func discordRoute(key throttle.KeyFunc) throttle.KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		if err != nil {
			return k, err
		}
		segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		major := false
		for i, s := range segs {
			if s == "" || strings.Trim(s, "0123456789") != "" {
				continue
			}
			if !major && i > 0 && (segs[i-1] == "channels" || segs[i-1] == "guilds" || segs[i-1] == "webhooks") {
				major = true
				continue
			}
			segs[i] = "{id}"
		}
		return k + ":" + r.Method + " /" + strings.Join(segs, "/"), nil
	}
}
