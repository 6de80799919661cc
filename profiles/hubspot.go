package profiles

import (
	"time"

	"github.com/throttle-go/throttle"
)

// HubSpot returns the rule of HubSpot's API (api.hubapi.com) for a private
// app's token: 100 requests per 10 seconds (190 on Professional and
// Enterprise: set Limits). The daily allocation is learned from
// X-HubSpot-RateLimit-Daily-Remaining. Documented at developers.hubspot.com,
// "API usage guidelines and limits", as of 2026-05.
func HubSpot() throttle.Rule {
	return throttle.Rule{
		Name:   "hubspot",
		Host:   "api.hubapi.com",
		Key:    throttle.ByAuthorization(),
		Limits: []throttle.Limit{throttle.Per(100, 10*time.Second)},
	}
}
