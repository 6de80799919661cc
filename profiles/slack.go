package profiles

import (
	"net/http"

	"github.com/throttle-go/throttle"
)

// Slack returns the rule of Slack's Web API (slack.com/api/) for the
// methods of tier (1 to 4): 1, 20, 50 or 100 requests per minute, per
// method and workspace token. Slack answers only a 429 with Retry-After.
// Documented at api.slack.com/apis/rate-limits, as of 2026-05; a tier out
// of range is tier 1.
func Slack(tier int) throttle.Rule {
	perMinute := map[int]int{1: 1, 2: 20, 3: 50, 4: 100}[tier]
	if perMinute == 0 {
		perMinute = 1
	}
	byToken := throttle.ByAuthorization()
	return throttle.Rule{
		Name:       "slack",
		Host:       "slack.com",
		PathPrefix: "/api/",
		// One log per token and method: the limits are per method.
		Key: func(r *http.Request) (string, error) {
			k, err := byToken(r)
			if err != nil {
				return "", err
			}
			return k + " " + r.URL.Path, nil
		},
		Limits: []throttle.Limit{throttle.PerMinute(perMinute)},
	}
}
