package profiles

import "github.com/throttle-go/throttle"

// GoogleMaps returns the rule of Google Maps Platform's web services
// (maps.googleapis.com) for an API key passed in the key query parameter:
// perMinute requests per minute (the project's quota in the Cloud console,
// 3,000 by default for most services). A 200 whose body says
// OVER_QUERY_LIMIT, as the legacy web services answer, is a refusal.
// Documented at developers.google.com/maps, "Usage and Billing" and
// "Geocoding API: Status codes", as of 2026-05.
func GoogleMaps(perMinute int) throttle.Rule {
	return throttle.Rule{
		Name:    "google-maps",
		Host:    "maps.googleapis.com",
		Key:     throttle.ByQuery("key"),
		Limits:  []throttle.Limit{throttle.PerMinute(perMinute)},
		Refused: []throttle.Refusal{{Status: 200, Body: "OVER_QUERY_LIMIT"}},
	}
}
