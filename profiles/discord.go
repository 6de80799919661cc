package profiles

import "github.com/throttle-go/throttle"

// Discord returns the rule of Discord's HTTP API (discord.com/api/) for a
// bot token: the global limit of 50 requests per second. Each route's
// bucket is learned from its responses (X-RateLimit-Remaining and
// -Reset-After pause the key when a bucket is empty); buckets shared by the
// fleet by their X-RateLimit-Bucket id are not yet. Documented at
// discord.com/developers/docs/topics/rate-limits, as of 2026-05.
func Discord() throttle.Rule {
	return throttle.Rule{
		Name:       "discord",
		Host:       "discord.com",
		PathPrefix: "/api/",
		Key:        throttle.ByAuthorization(),
		Limits:     []throttle.Limit{throttle.PerSecond(50)},
	}
}
