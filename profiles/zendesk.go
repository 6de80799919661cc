package profiles

import "github.com/throttle-go/throttle"

// Zendesk returns the rule of an account's Zendesk Support API
// (*.zendesk.com), keyed by the account (its host): perMinute requests per
// minute, the account's limit, which its plan sets: 200 on Team, 400 on
// Growth and Professional, 700 on Enterprise, 2,500 with the High Volume
// API add-on (included in Enterprise Plus). Zendesk answers 429 with
// Retry-After; the ratelimit-limit, -remaining and -reset fields of its
// ticketing endpoints are read as a budget (X-Rate-Limit-Remaining, without
// a reset, says nothing of when more will come). The endpoints' own limits
// (ticket updates: 100 per minute per account, 30 per 10 minutes per user
// and ticket; deep pages of List Tickets: 50 per minute) are not encoded:
// they need a rule that counts those requests apart from the account's
// others. Documented at developer.zendesk.com, "Rate limits", and
// support.zendesk.com, "Managing API usage in your Zendesk account", as of
// 2026-11.
func Zendesk(perMinute int) throttle.Rule {
	return throttle.Rule{
		Name:   "zendesk",
		Host:   "*.zendesk.com",
		Key:    throttle.ByHost(),
		Limits: []throttle.Limit{throttle.PerMinute(perMinute)},
	}
}
