package profiles

import "github.com/throttle-go/throttle"

// Salesforce returns the rule of an org's Salesforce REST API
// (*.my.salesforce.com), keyed by the org's host: its allocation of
// requests per rolling 24 hours (Setup, "API Requests, Last 24 Hours"),
// shared with the org's other integrations, which Sforce-Limit-Info
// reports, and 25 requests in flight (the cap on long-running ones). A 403
// REQUEST_LIMIT_EXCEEDED is a refusal. Documented at
// developer.salesforce.com, "API Request Limits and Allocations", as of
// 2026-05.
func Salesforce(perDay int) throttle.Rule {
	return throttle.Rule{
		Name:     "salesforce",
		Host:     "*.my.salesforce.com",
		Key:      throttle.ByHost(),
		Limits:   []throttle.Limit{throttle.PerDay(perDay)},
		InFlight: 25,
		Refused:  []throttle.Refusal{{Status: 403, Body: "REQUEST_LIMIT_EXCEEDED"}},
	}
}
