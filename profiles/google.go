package profiles

import (
	"time"

	"github.com/throttle-go/throttle"
)

// pacific is where Google's daily quotas reset: at midnight Pacific time.
// Without the time zone database (no tzdata on the system nor
// time/tzdata in the binary), a daily quota counts days at UTC-8, Pacific
// standard time, which starts each summer day an hour late.
var pacific = func() *time.Location {
	if loc, err := time.LoadLocation("America/Los_Angeles"); err == nil {
		return loc
	}
	return time.FixedZone("PST", -8*60*60)
}()

// GoogleMaps returns the rule of Google Maps Platform's web services
// (maps.googleapis.com) for an API key passed in the key query parameter:
// perMinute requests per minute (the project's quota in the Cloud console,
// 3,000 by default for most services) and, unless perDay is 0, perDay
// requests per day, a day that starts at midnight Pacific time, as
// Google's daily quotas reset (throttle.Daily). A 200 whose body says
// OVER_QUERY_LIMIT, as the legacy web services answer, is a refusal.
// Documented at developers.google.com/maps, "Usage and Billing" and
// "Geocoding API: Status codes", and cloud.google.com/docs/quotas, as of
// 2026-05.
func GoogleMaps(perMinute, perDay int) throttle.Rule {
	r := throttle.Rule{
		Name:    "google-maps",
		Host:    "maps.googleapis.com",
		Key:     throttle.ByQuery("key"),
		Limits:  []throttle.Limit{throttle.PerMinute(perMinute)},
		Refused: []throttle.Refusal{{Status: 200, Body: "OVER_QUERY_LIMIT"}},
	}
	if perDay > 0 {
		r.Also = []throttle.KeyLimit{throttle.Daily(perDay, pacific, throttle.ByQuery("key"))}
	}
	return r
}
