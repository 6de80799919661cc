// Package upstream reads what an upstream's responses say about its limits:
// whether a response is a refusal, the pause it asks for, the budgets it
// states, the limits it implies; and turns that into what a store keeps for
// the key (contract.Learned). It does no I/O beyond a response's headers and,
// when a rule asks, a bounded prefix of its body.
package upstream

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file parses what an upstream says about its limits. Every parser is
// total: malformed, negative, huge or far-future values are ignored or capped,
// never trusted blindly, and nothing panics (the parsers are fuzzed).

// MaxPause caps every wait the upstream imposes (Retry-After, a reset, a
// pause for X-App-Usage): a larger value is cut to it. The pause ends then and
// the next response says again what the upstream wants.
const MaxPause = time.Hour

// epochThreshold tells an epoch from a delta in X-RateLimit-Reset: values at
// or above it (2001-09-09 as seconds since 1970) are epoch seconds, smaller
// ones seconds from now. No window lasts 31 years, and no API sends an epoch
// from before 2001.
const epochThreshold = 1_000_000_000

// maxWindow is the longest window a policy may state: a year, the longest
// a rule's limit may have.
const maxWindow = 366 * 24 * time.Hour

// MaxCount bounds the limits and remainders read from headers.
const MaxCount = 1 << 40

// Said is what one response said about its key's limits.
type Said struct {
	// Refused says the response is a refusal (Dialect.Read).
	Refused bool
	// RetryAfter is the Retry-After header, if HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Limit is X-RateLimit-Limit (its window unknown), 0 when not given.
	Limit int
	// Policies are the RateLimit-Policy items.
	Policies []Policy
	// Remaining units until Reset, if HasBudget.
	Remaining int
	Reset     time.Duration
	HasBudget bool
	// Refills says the budget is a bucket refilled continuously and Reset
	// the time until it is full again (OpenAI's and Anthropic's
	// x-ratelimit-reset-*), not the end of a window: nothing left means
	// the next units come back gradually, not at Reset.
	Refills bool
	// Usage is the highest percentage of X-App-Usage and
	// X-Business-Use-Case-Usage, if HasUsage.
	Usage    float64
	HasUsage bool
	// Dims are budgets of other dimensions than the key's requests, each
	// apart (dialects.go): tokens, a day, an org's allocation.
	Dims []Budget
	// Resource is GitHub's x-ratelimit-resource (core, search, graphql);
	// Bucket is Discord's X-RateLimit-Bucket, and Global its
	// X-RateLimit-Global: true.
	Resource, Bucket string
	Global           bool
	// Window is a route bucket's length, when the response is its
	// bucket's first (Discord: X-RateLimit-Bucket, Remaining one below
	// Limit, and Reset-After the whole window); 0 otherwise.
	Window time.Duration
}

// budgetFields are the X-RateLimit-* fields and the IETF draft's older
// RateLimit-* ones, in canonical form (so that Header.Get does not
// allocate), the first preferred.
var budgetFields = [...]struct {
	limit, remaining, reset string
	epochOK                 bool
}{
	{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", true},
	{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", false},
	{"X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset", true}, // X
}

// Policy is one RateLimit-Policy item: Q units per W.
type Policy struct {
	Q int
	W time.Duration
}

// ReadHeaders reads the rate-limit headers of a response received at now.
// Times given as dates (Retry-After, an epoch X-RateLimit-Reset) are taken
// relative to the response's Date header when it is valid, so that the
// client's clock skew does not matter.
func ReadHeaders(h http.Header, now time.Time) Said {
	var s Said
	// The Date header is parsed only when a date or an epoch needs it.
	var refTime time.Time
	ref := func() time.Time {
		if refTime.IsZero() {
			refTime = now
			if d, err := http.ParseTime(h.Get("Date")); err == nil {
				refTime = d
			}
		}
		return refTime
	}
	if v := h.Get("Retry-After"); v != "" {
		s.RetryAfter, s.HasRetryAfter = parseRetryAfter(v, ref)
	}

	// The dialects whose names are their own (dialects.go); Discord's
	// exact reset first.
	readDialects(h, &s, ref)

	// X-RateLimit-* (GitHub, Reddit and many others), else the older
	// drafts' RateLimit-Limit/Remaining/Reset (reset always in seconds
	// from now), else X's x-rate-limit-*.
	for _, p := range budgetFields {
		lim, okL := parseCount(h.Get(p.limit))
		rem, okR := parseRemaining(h.Get(p.remaining))
		reset, okT := parseReset(h.Get(p.reset), ref, p.epochOK)
		if okL && lim > 0 && s.Limit == 0 {
			s.Limit = lim
		}
		if okR && okT && !s.HasBudget {
			s.Remaining, s.Reset, s.HasBudget = rem, reset, true
		}
	}

	// IETF RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers).
	if v := h.Values("Ratelimit-Policy"); len(v) > 0 {
		s.Policies = append(s.Policies, parsePolicies(v)...)
	}
	if r, t, ok := parseRateLimit(h.Values("Ratelimit")); ok {
		s.Remaining, s.Reset, s.HasBudget = r, t, true
	}

	if v := h.Get("X-App-Usage"); v != "" {
		if u, ok := parseAppUsage(v); ok {
			s.Usage, s.HasUsage = max(s.Usage, u), true
		}
	}
	return s
}

// parseRetryAfter reads Retry-After: delta seconds (fractions accepted, as
// some APIs send them), or an HTTP date taken relative to ref (the response's
// Date, else the local clock). A date in the past is 0; more than
// MaxPause is capped to it.
func parseRetryAfter(v string, ref func() time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if d, ok := parseSeconds(v); ok {
		return d, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return capPause(t.Sub(ref())), true
}

// parseSeconds reads a non-negative number of seconds, with an optional
// fraction, capped at MaxPause. Signs, exponents, hex, NaN and
// infinities are refused.
func parseSeconds(v string) (time.Duration, bool) {
	f, ok := parseDecimal(v)
	if !ok {
		return 0, false
	}
	if f >= MaxPause.Seconds() {
		return MaxPause, true
	}
	return time.Duration(math.Round(f * float64(time.Second))), true
}

// capPause clamps a wait to [0, MaxPause].
func capPause(d time.Duration) time.Duration {
	return min(max(d, 0), MaxPause)
}

// parseCount reads a non-negative integer, at most MaxCount.
func parseCount(v string) (int, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > MaxCount || v[0] == '+' {
		return 0, false
	}
	return int(n), true
}

// parseReset reads a reset: epoch seconds when epochOK and the value is at
// least epochThreshold (taken relative to ref, the response's Date), else
// seconds from now. A reset in the past is 0, one beyond MaxPause is
// capped to it.
func parseReset(v string, ref func() time.Time, epochOK bool) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if f, ok := parseDecimal(v); ok && epochOK && f >= epochThreshold {
		// Discord sends its epoch with a fraction: 1470173023.123.
		sec, frac := math.Modf(f)
		return capPause(time.Unix(int64(sec), int64(math.Round(frac*1e9))).Sub(ref())), true
	}
	return parseSeconds(v)
}

// parseDecimal reads a non-negative decimal number (digits, one optional
// dot between digits) of at most 32 bytes.
func parseDecimal(v string) (float64, bool) {
	if v == "" || len(v) > 32 {
		return 0, false
	}
	dot := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0 && i < len(v)-1:
			dot = true
		default:
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil && f >= 0 && !math.IsInf(f, 0)
}

// parseRemaining reads a count that may come with a fraction (Reddit's
// X-Ratelimit-Remaining: 598.0), rounded down, at most MaxCount.
func parseRemaining(v string) (int, bool) {
	v = strings.TrimSpace(v)
	if n, ok := parseCount(v); ok {
		return n, true
	}
	f, ok := parseDecimal(v)
	if !ok || f > MaxCount {
		return 0, false
	}
	return int(f), true
}

// parsePolicies reads RateLimit-Policy items: `"name";q=100;w=60`, several
// per field or over several fields. Items without a positive q and w, or
// with a partition key (pk) or a quota unit (qu) other than requests, are
// skipped: they do not describe this client's count of requests.
func parsePolicies(fields []string) []Policy {
	var out []Policy
	for _, it := range sfItems(fields) {
		q, okQ := parseCount(it.params["q"])
		w, okW := parseCount(it.params["w"])
		if len(out) == 8 || !okQ || !okW || q < 1 || w < 1 || w > int(maxWindow/time.Second) {
			continue
		}
		if qu, ok := it.params["qu"]; ok && strings.Trim(qu, `"`) != "requests" {
			continue
		}
		out = append(out, Policy{Q: q, W: time.Duration(w) * time.Second})
	}
	return out
}

// parseRateLimit reads RateLimit items: `"name";r=50;t=30`. With several, the
// one with the fewest remaining units wins (the latest reset on a tie).
func parseRateLimit(fields []string) (remaining int, reset time.Duration, ok bool) {
	for _, it := range sfItems(fields) {
		r, okR := parseCount(it.params["r"])
		t, okT := parseCount(it.params["t"])
		if !okR || !okT {
			continue
		}
		d := capPause(time.Duration(min(t, int(MaxPause/time.Second))) * time.Second)
		if !ok || r < remaining || r == remaining && d > reset {
			remaining, reset, ok = r, d, true
		}
	}
	return remaining, reset, ok
}

// sfItem is one member of a Structured Field list (RFC 9651), reduced to what
// these headers use: a bare item and its parameters, values as text.
type sfItem struct {
	name   string
	params map[string]string
}

// sfItems splits Structured Field lists into items, tolerantly: commas and
// semicolons inside quoted strings are kept, and a malformed member yields
// whatever parameters parse. At most 16 items and 16 parameters each are
// read, so a huge header costs little.
func sfItems(fields []string) []sfItem {
	var items []sfItem
	for _, f := range fields {
		for _, member := range splitOutsideQuotes(f, ',') {
			if len(items) == 16 {
				return items
			}
			parts := splitOutsideQuotes(member, ';')
			it := sfItem{name: strings.TrimSpace(parts[0]), params: map[string]string{}}
			for _, p := range parts[1:] {
				if len(it.params) == 16 {
					break
				}
				k, v, _ := strings.Cut(p, "=")
				k = strings.ToLower(strings.TrimSpace(k))
				if k == "" {
					continue
				}
				if _, dup := it.params[k]; !dup {
					it.params[k] = strings.TrimSpace(v)
				}
			}
			items = append(items, it)
		}
	}
	return items
}

// splitOutsideQuotes splits s at sep, except inside "quoted strings" (with
// backslash escapes).
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// parseAppUsage reads Meta's X-App-Usage, a JSON object of percentages
// ({"call_count":28,"total_time":25,"total_cputime":25}), and returns the
// highest, capped at 1000. Unknown fields are ignored; a negative, non-numeric
// or absent value does not count.
func parseAppUsage(v string) (float64, bool) {
	if len(v) > 4096 {
		return 0, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return 0, false
	}
	best, ok := 0.0, false
	for _, k := range []string{"call_count", "total_time", "total_cputime"} {
		raw, found := m[k]
		if !found {
			continue
		}
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		best, ok = max(best, min(f, 1000)), true
	}
	return best, ok
}
