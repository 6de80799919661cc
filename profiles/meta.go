package profiles

import (
	"time"

	"github.com/throttle-go/throttle"
)

// Meta returns the rule of Meta's Graph API (graph.facebook.com) for an
// app's token (the access_token query parameter, else the Authorization
// header): callsPerHour calls per rolling hour (Meta allows 200 per hour
// for each of the app's users), sent in bursts as a rolling window allows
// (NoDefaultPace). X-App-Usage and X-Business-Use-Case-Usage, the usage
// Meta reports as percentages, spread the key's sends over the hour from
// 80% (at no less than 99% of its rate) and pause it at 100%, for the
// estimated_time_to_regain_access Meta states or else a hundredth of the
// hour per percent over 99.
// A 400 or 403 whose error says a request limit was reached (codes 4, 17,
// 32, 613 and the business use cases' 800xx) is a refusal. Documented at
// developers.facebook.com, "Rate Limits" (Graph API), as of 2026-05.
func Meta(callsPerHour int) throttle.Rule {
	var refused []throttle.Refusal
	for _, status := range []int{400, 403} {
		for _, word := range []string{"request limit reached", "too many calls", "exceeded the rate limit"} {
			refused = append(refused, throttle.Refusal{Status: status, Body: word})
		}
	}
	return throttle.Rule{
		Name:          "meta",
		Host:          "graph.facebook.com",
		Key:           throttle.FirstOf(throttle.ByQuery("access_token"), throttle.ByAuthorization()),
		Limits:        []throttle.Limit{throttle.PerHour(callsPerHour)},
		NoDefaultPace: true,
		Refused:       refused,
		MaxServerWait: 5 * time.Minute,
	}
}
