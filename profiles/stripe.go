package profiles

import "github.com/throttle-go/throttle"

// Stripe returns the rule of Stripe's API (api.stripe.com) for a live-mode
// secret key: 100 requests per second. A 429 whose error code is
// lock_timeout (another request holds the object's lock) is no rate limit
// and does not slow the fleet. Documented at docs.stripe.com, "Rate
// limits", as of 2026-05: 100 operations per second in live mode (25 in
// test mode: set Limits), 25 per second for some endpoints.
func Stripe() throttle.Rule {
	return throttle.Rule{
		Name:       "stripe",
		Host:       "api.stripe.com",
		Key:        throttle.ByAuthorization(),
		Limits:     []throttle.Limit{throttle.PerSecond(100)},
		NotRefused: []throttle.Refusal{{Status: 429, Body: "lock_timeout"}},
	}
}
