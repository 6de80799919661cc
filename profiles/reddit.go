package profiles

import "github.com/throttle-go/throttle"

// Reddit returns the rule of Reddit's OAuth API (oauth.reddit.com) for a
// client's token: 100 requests per minute. A RATELIMIT error in the body
// (an action done too often) is a refusal. Documented at
// support.reddithelp.com, "Data API Wiki", as of 2026-05.
func Reddit() throttle.Rule {
	return throttle.Rule{
		Name:    "reddit",
		Host:    "oauth.reddit.com",
		Key:     throttle.ByAuthorization(),
		Limits:  []throttle.Limit{throttle.PerMinute(100)},
		Refused: []throttle.Refusal{{Body: "RATELIMIT"}},
	}
}
