package upstream

import (
	"encoding/json"
	"math"
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// This file reads the rate-limit headers of the APIs whose names are their
// own (every one checked against the API's public documentation, as of
// 2026-05): what each states about budgets beyond the key's requests goes
// to Said.Dims, one budget per dimension, so that an exhausted one pauses
// the key until its own reset and no other's.
//
//   - GitHub REST (docs.github.com, "Rate limits for the REST API"):
//     x-ratelimit-limit/-remaining/-used/-reset (epoch) as X-RateLimit-*,
//     and x-ratelimit-resource: core, search, graphql … (separate budgets).
//   - Discord (discord.com/developers/docs/topics/rate-limits):
//     X-RateLimit-Reset-After (float seconds, preferred to -Reset, an
//     epoch with a fraction), -Bucket, -Global, -Scope.
//   - X v2 (developer.x.com, "Rate limits"): x-rate-limit-limit/
//     -remaining/-reset (epoch); x-user-limit-24hour-* and
//     x-app-limit-24hour-* (the 24-hour limits).
//   - Shopify REST (shopify.dev, "REST Admin API rate limits"):
//     X-Shopify-Shop-Api-Call-Limit: 32/40 (used/size of the bucket).
//   - Salesforce (developer.salesforce.com, "Limit Info Header"):
//     Sforce-Limit-Info: api-usage=10018/100000 (used/allocation of the
//     org's rolling day).
//   - HubSpot (developers.hubspot.com, "API usage guidelines"):
//     X-HubSpot-RateLimit-Max/-Remaining/-Interval-Milliseconds (the
//     burst window), -Secondly/-Secondly-Remaining, -Daily/-Daily-Remaining.
//   - Reddit (github.com/reddit-archive/reddit/wiki/API): X-Ratelimit-Used/
//     -Remaining (with a fraction)/-Reset (seconds): read as X-RateLimit-*.
//   - Meta Graph (developers.facebook.com, "Rate Limits"): X-App-Usage
//     (headers.go) and X-Business-Use-Case-Usage, a JSON object per
//     business id with estimated_time_to_regain_access in minutes.
//   - OpenAI (platform.openai.com/docs/guides/rate-limits):
//     x-ratelimit-{limit,remaining,reset}-{requests,tokens}, resets as
//     durations (1s, 6m0s, 20ms); Azure OpenAI sends the same names with
//     resets in seconds.
//   - Anthropic (docs.anthropic.com, "Rate limits"):
//     anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
//     {limit,remaining,reset}, resets as RFC 3339 times.

// Budget is what a response states of one dimension of its limits.
type Budget struct {
	// Name says which: "tokens", "input-tokens", "output-tokens",
	// "user-24hour", "app-24hour", "daily", "api-usage", "bucket",
	// "business-use-case".
	Name string
	// Limit is the dimension's size, 0 if not stated.
	Limit int
	// Remaining units until Reset; Reset 0 is not stated.
	Remaining int
	Reset     time.Duration
	// Refills: see Said.Refills.
	Refills bool
}

// dimFields names the headers of one dimension: its Budget's name and its
// limit, remaining and reset fields, in canonical form.
type dimFields struct{ dim, limit, remaining, reset string }

// fieldsOf builds the dimFields of each dimension in dims, name giving a
// field's header: built once, for every response reads them, and a name
// built per response, not in canonical form, costs Header.Get two
// allocations.
func fieldsOf(dims []string, name func(dim, field string) string) []dimFields {
	out := make([]dimFields, len(dims))
	for i, d := range dims {
		c := func(field string) string { return textproto.CanonicalMIMEHeaderKey(name(d, field)) }
		out[i] = dimFields{d, c("Limit"), c("Remaining"), c("Reset")}
	}
	return out
}

var (
	openAIFields = fieldsOf([]string{"requests", "tokens"},
		func(d, f string) string { return "X-Ratelimit-" + f + "-" + d })
	anthropicFields = fieldsOf([]string{"requests", "tokens", "input-tokens", "output-tokens"},
		func(d, f string) string { return "Anthropic-Ratelimit-" + d + "-" + f })
	xDayFields = fieldsOf([]string{"user-24hour", "app-24hour"},
		func(d, f string) string { return "X-" + strings.TrimSuffix(d, "-24hour") + "-Limit-24hour-" + f })
)

// maxDims bounds the budgets read from one response.
const maxDims = 8

// readDialects adds to s what the headers of the dialects above state.
// ref returns the time dates are taken relative to.
func readDialects(h http.Header, s *Said, ref func() time.Time) {
	s.Resource = token(h.Get("X-Ratelimit-Resource"))
	s.Bucket = token(h.Get("X-Ratelimit-Bucket"))
	s.Global = strings.EqualFold(strings.TrimSpace(h.Get("X-Ratelimit-Global")), "true")

	// Discord: Reset-After, in seconds with a fraction, is exact where
	// the epoch reset depends on the clocks.
	if rem, ok := parseRemaining(h.Get("X-Ratelimit-Remaining")); ok {
		if d, ok := parseSeconds(strings.TrimSpace(h.Get("X-Ratelimit-Reset-After"))); ok {
			s.Remaining, s.Reset, s.HasBudget = rem, d, true
			// The first request of a bucket opens its window: what is
			// left of it is all of it.
			if lim, ok := parseCount(h.Get("X-Ratelimit-Limit")); ok && s.Bucket != "" && lim > 0 && rem == lim-1 && d > 0 {
				s.Window = d
			}
		}
	}

	// OpenAI (and Azure OpenAI): requests are the key's budget, tokens a
	// dimension of their own.
	for _, f := range openAIFields {
		lim, _ := parseCount(h.Get(f.limit))
		rem, okR := parseRemaining(h.Get(f.remaining))
		reset, okT := parseDuration(h.Get(f.reset))
		if okR && okT {
			s.budget(f.dim, lim, rem, reset, true)
		}
	}

	// Anthropic: the same, with resets as RFC 3339 times.
	for _, f := range anthropicFields {
		lim, _ := parseCount(h.Get(f.limit))
		rem, okR := parseRemaining(h.Get(f.remaining))
		reset, okT := parseDate(h.Get(f.reset), ref)
		if okR && okT {
			s.budget(f.dim, lim, rem, reset, true)
		}
	}

	// X: its 24-hour limits, per user and per app, beside the 15-minute
	// window of x-rate-limit-* (budgetFields).
	for _, f := range xDayFields {
		lim, _ := parseCount(h.Get(f.limit))
		rem, okR := parseRemaining(h.Get(f.remaining))
		reset, okT := parseReset(h.Get(f.reset), ref, true)
		if okR && okT {
			s.dim(Budget{Name: f.dim, Limit: lim, Remaining: rem, Reset: reset})
		}
	}

	// Shopify: a leaky bucket's fill, used/size.
	if used, size, ok := parseFraction(h.Get("X-Shopify-Shop-Api-Call-Limit")); ok {
		s.dim(Budget{Name: "bucket", Limit: size, Remaining: size - used})
	}

	// Salesforce: the org's allocation, shared with its other integrations.
	if v := h.Get("Sforce-Limit-Info"); v != "" {
		for _, part := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(part, "=")
			if strings.TrimSpace(k) != "api-usage" {
				continue
			}
			if used, size, ok := parseFraction(val); ok {
				s.dim(Budget{Name: "api-usage", Limit: size, Remaining: size - used})
			}
		}
	}

	// HubSpot: a burst window of Interval-Milliseconds (or the older
	// per-second fields), and a daily allocation.
	most, okM := parseCount(h.Get("X-Hubspot-Ratelimit-Max"))
	interval, okI := parseCount(h.Get("X-Hubspot-Ratelimit-Interval-Milliseconds"))
	if !okM || !okI {
		most, okM = parseCount(h.Get("X-Hubspot-Ratelimit-Secondly"))
		interval, okI = 1000, true
	}
	if okM && okI && most > 0 && interval >= 1000 && interval <= int(maxWindow/time.Millisecond) {
		w := time.Duration(interval) * time.Millisecond
		if len(s.Policies) < 8 {
			s.Policies = append(s.Policies, Policy{Q: most, W: w})
		}
		rem, ok := parseCount(h.Get("X-Hubspot-Ratelimit-Remaining"))
		if !ok {
			rem, ok = parseCount(h.Get("X-Hubspot-Ratelimit-Secondly-Remaining"))
		}
		if ok && !s.HasBudget {
			// A rolling window: all it holds has left it one window
			// from now, so the remaining units last at least that long;
			// but units come back as the oldest requests leave it, not
			// at once then: nothing left is no pause for a window
			// (Refills), which would halve a fleet at the full rate.
			s.Remaining, s.Reset, s.HasBudget, s.Refills = rem, capPause(w), true, true
		}
	}
	if lim, ok := parseCount(h.Get("X-Hubspot-Ratelimit-Daily")); ok {
		if rem, ok := parseCount(h.Get("X-Hubspot-Ratelimit-Daily-Remaining")); ok {
			s.dim(Budget{Name: "daily", Limit: lim, Remaining: rem})
		}
	}

	// Meta: the business use cases' percentages and their regain time.
	if v := h.Get("X-Business-Use-Case-Usage"); v != "" {
		if pct, regain, ok := parseBusinessUsage(v); ok {
			s.Usage, s.HasUsage = max(s.Usage, pct), true
			if regain > 0 {
				s.dim(Budget{Name: "business-use-case", Reset: regain})
			}
		}
	}
}

// budget records a budget of dimension dim: "requests" is the key's own
// budget (unless one was read already), any other a dimension apart.
// refills says it is a bucket refilled continuously (see Said.Refills).
func (s *Said) budget(dim string, lim, rem int, reset time.Duration, refills bool) {
	if dim == "requests" {
		if !s.HasBudget {
			s.Remaining, s.Reset, s.HasBudget, s.Refills = rem, reset, true, refills
		}
		if s.Limit == 0 {
			s.Limit = lim
		}
		return
	}
	s.dim(Budget{Name: dim, Limit: lim, Remaining: rem, Reset: reset, Refills: refills})
}

func (s *Said) dim(b Budget) {
	if len(s.Dims) < maxDims {
		b.Remaining = max(b.Remaining, 0)
		s.Dims = append(s.Dims, b)
	}
}

// Exhausted returns the latest reset of the budgets that have nothing
// left (the key's own and every dimension's), zero if none.
func (s *Said) Exhausted() time.Duration {
	var until time.Duration
	if s.HasBudget && s.Remaining == 0 {
		until = s.Reset
	}
	for _, b := range s.Dims {
		if b.Remaining == 0 {
			until = max(until, b.Reset)
		}
	}
	return until
}

// Stated reports whether the response stated a wait: Retry-After, a
// budget exhausted until a reset, or X-App-Usage at 100%.
func (s *Said) Stated() bool {
	return s.HasRetryAfter || s.Exhausted() > 0 || s.HasUsage && s.Usage >= 100
}

// token returns v trimmed if it is a short printable name, else "".
func token(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 64 || !isToken(v) {
		return ""
	}
	return v
}

// parseFraction reads "used/size" with 0 <= used <= size.
func parseFraction(v string) (used, size int, ok bool) {
	a, b, found := strings.Cut(strings.TrimSpace(v), "/")
	u, okU := parseCount(a)
	n, okN := parseCount(b)
	if !found || !okU || !okN || u > n {
		return 0, 0, false
	}
	return u, n, true
}

// parseDuration reads a reset as OpenAI states it, a duration such as 1s,
// 6m0s, 20ms or 1h2m3.5s, or as Azure OpenAI does, seconds; capped at
// MaxPause.
func parseDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if d, ok := parseSeconds(v); ok {
		return d, true
	}
	if v == "" || len(v) > 32 || v[0] < '0' || v[0] > '9' {
		return 0, false // no sign, no bare unit
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, false
	}
	return capPause(d), true
}

// parseDate reads an RFC 3339 time as a wait from ref, in [0, MaxPause].
func parseDate(v string, ref func() time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 64 {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, false
	}
	return capPause(t.Sub(ref())), true
}

// parseBusinessUsage reads Meta's X-Business-Use-Case-Usage,
// {"<business id>": [{"type": "ads_management", "call_count": 28,
// "total_cputime": 25, "total_time": 25,
// "estimated_time_to_regain_access": 0}], …}: the highest percentage
// (capped at 1000) and the longest time to regain access (minutes).
func parseBusinessUsage(v string) (pct float64, regain time.Duration, ok bool) {
	if len(v) > 8192 {
		return 0, 0, false
	}
	var m map[string][]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return 0, 0, false
	}
	num := func(raw json.RawMessage) (float64, bool) {
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, false
		}
		return f, true
	}
	for _, cases := range m {
		for _, c := range cases {
			for _, k := range [...]string{"call_count", "total_time", "total_cputime"} {
				if f, found := num(c[k]); found {
					pct, ok = max(pct, min(f, 1000)), true
				}
			}
			if f, found := num(c["estimated_time_to_regain_access"]); found {
				regain = max(regain, capPause(time.Duration(min(f, MaxPause.Minutes())*float64(time.Minute))))
				ok = true
			}
		}
	}
	return pct, regain, ok
}
