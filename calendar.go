package throttle

import "time"

// This file is the calendar day of a quota that resets at midnight in a
// time zone (Google's daily quotas reset at midnight Pacific time): a key
// of the rule's Also that changes with the day, so that each day's requests
// are counted in a log of their own.

// dayWindow is the window of a daily quota's limit: the longest calendar
// day (25 hours, when a zone leaves daylight saving time), so that a day's
// log counts every request of its day.
const dayWindow = 25 * time.Hour

// Daily returns a KeyLimit of n requests per calendar day in loc, under
// key: the day's count starts afresh at each midnight in loc, daylight
// saving time included (days of 23 and 25 hours). Add it to a rule's Also;
// its Name is "daily". A nil loc is UTC.
func Daily(n int, loc *time.Location, key KeyFunc) KeyLimit {
	if loc == nil {
		loc = time.UTC
	}
	return KeyLimit{Name: "daily", Key: key, Limits: []Limit{{N: n, Per: dayWindow}}, zone: loc}
}

// dayKey returns v scoped to the calendar day of now in the KeyLimit's zone
// (v as it is without one).
func (a *KeyLimit) dayKey(v string, now time.Time) string {
	if a.zone == nil {
		return v
	}
	return v + "|" + now.In(a.zone).Format(time.DateOnly)
}
