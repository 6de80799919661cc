package throttle

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

// maxServerPause caps every wait the upstream imposes (Retry-After, a reset, a
// pause for X-App-Usage): a larger value is cut to it. The pause ends then and
// the next response says again what the upstream wants.
const maxServerPause = time.Hour

// epochThreshold tells an epoch from a delta in X-RateLimit-Reset: values at
// or above it (2001-09-09 as seconds since 1970) are epoch seconds, smaller
// ones seconds from now. No window lasts 31 years, and no API sends an epoch
// from before 2001.
const epochThreshold = 1_000_000_000

// maxCount bounds the limits and remainders read from headers.
const maxCount = 1 << 40

// signals is what one response said about its key's limits.
type signals struct {
	// retryAfter is the Retry-After header, if hasRetryAfter.
	retryAfter    time.Duration
	hasRetryAfter bool
	// limit is X-RateLimit-Limit (its window unknown), 0 when not given.
	limit int
	// policies are the RateLimit-Policy items.
	policies []ratePolicy
	// remaining units until reset, if hasBudget.
	remaining int
	reset     time.Duration
	hasBudget bool
	// usage is the highest percentage of X-App-Usage, if hasUsage.
	usage    float64
	hasUsage bool
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
}

// ratePolicy is one RateLimit-Policy item: q units per w.
type ratePolicy struct {
	q int
	w time.Duration
}

// parseSignals reads the rate-limit headers of a response received at now.
// Times given as dates (Retry-After, an epoch X-RateLimit-Reset) are taken
// relative to the response's Date header when it is valid, so that the
// client's clock skew does not matter.
func parseSignals(h http.Header, now time.Time) signals {
	var s signals
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
		s.retryAfter, s.hasRetryAfter = parseRetryAfter(v, ref)
	}

	// X-RateLimit-* (GitHub, X and many others), else the older drafts'
	// RateLimit-Limit/Remaining/Reset (reset always in seconds from now).
	for _, p := range budgetFields {
		lim, okL := parseCount(h.Get(p.limit))
		rem, okR := parseCount(h.Get(p.remaining))
		reset, okT := parseReset(h.Get(p.reset), ref, p.epochOK)
		if okL && lim > 0 && s.limit == 0 {
			s.limit = lim
		}
		if okR && okT && !s.hasBudget {
			s.remaining, s.reset, s.hasBudget = rem, reset, true
		}
	}

	// IETF RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers).
	if v := h.Values("Ratelimit-Policy"); len(v) > 0 {
		s.policies = parsePolicies(v)
	}
	if r, t, ok := parseRateLimit(h.Values("Ratelimit")); ok {
		s.remaining, s.reset, s.hasBudget = r, t, true
	}

	if v := h.Get("X-App-Usage"); v != "" {
		s.usage, s.hasUsage = parseAppUsage(v)
	}
	return s
}

// parseRetryAfter reads Retry-After: delta seconds (fractions accepted, as
// some APIs send them), or an HTTP date taken relative to ref (the response's
// Date, else the local clock). A date in the past is 0; more than
// maxServerPause is capped to it.
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
// fraction, capped at maxServerPause. Signs, exponents, hex, NaN and
// infinities are refused.
func parseSeconds(v string) (time.Duration, bool) {
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
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	if f >= maxServerPause.Seconds() {
		return maxServerPause, true
	}
	return time.Duration(f * float64(time.Second)), true
}

// capPause clamps a wait to [0, maxServerPause].
func capPause(d time.Duration) time.Duration {
	return min(max(d, 0), maxServerPause)
}

// parseCount reads a non-negative integer, at most maxCount.
func parseCount(v string) (int, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > maxCount || v[0] == '+' {
		return 0, false
	}
	return int(n), true
}

// parseReset reads a reset: epoch seconds when epochOK and the value is at
// least epochThreshold (taken relative to ref, the response's Date), else
// seconds from now. A reset in the past is 0, one beyond maxServerPause is
// capped to it.
func parseReset(v string, ref func() time.Time, epochOK bool) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, ok := parseCount(v); ok && epochOK && n >= epochThreshold {
		return capPause(time.Unix(int64(n), 0).Sub(ref())), true
	}
	return parseSeconds(v)
}

// parsePolicies reads RateLimit-Policy items: `"name";q=100;w=60`, several
// per field or over several fields. Items without a positive q and w, or
// with a partition key (pk) or a quota unit (qu) other than requests, are
// skipped: they do not describe this client's count of requests.
func parsePolicies(fields []string) []ratePolicy {
	var out []ratePolicy
	for _, it := range sfItems(fields) {
		q, okQ := parseCount(it.params["q"])
		w, okW := parseCount(it.params["w"])
		if len(out) == 8 || !okQ || !okW || q < 1 || w < 1 || w > int(maxPer/time.Second) {
			continue
		}
		if qu, ok := it.params["qu"]; ok && strings.Trim(qu, `"`) != "requests" {
			continue
		}
		out = append(out, ratePolicy{q: q, w: time.Duration(w) * time.Second})
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
		d := capPause(time.Duration(min(t, int(maxServerPause/time.Second))) * time.Second)
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
