package upstream

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/throttle-go/throttle/internal/contract"
)

// Each dialect read from the headers its API documents (samples from the
// documentation pages named in dialects.go).
func TestReadDialects(t *testing.T) {
	t.Parallel()
	now := refTime.Add(10 * time.Minute) // the client's clock is fast
	date := refTime.Format(http.TimeFormat)
	epoch := func(d time.Duration) string { return itoa(refTime.Add(d).Unix()) }
	tests := []struct {
		name string
		h    http.Header
		want Said
	}{
		{"GitHub: a resource's budget", header("Date", date, "x-ratelimit-limit", "30", "x-ratelimit-remaining", "29",
			"x-ratelimit-used", "1", "x-ratelimit-reset", epoch(50*time.Second), "x-ratelimit-resource", "search"),
			Said{Limit: 30, Remaining: 29, Reset: 50 * time.Second, HasBudget: true, Resource: "search"}},
		{"Discord: Reset-After over the epoch reset", header("Date", date, "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", epoch(time.Second)+".000", "X-RateLimit-Reset-After", "64.57",
			"X-RateLimit-Bucket", "abcd1234", "X-RateLimit-Global", "true", "X-RateLimit-Scope", "user"),
			Said{Limit: 5, Remaining: 0, Reset: 64570 * time.Millisecond, HasBudget: true, Bucket: "abcd1234", Global: true}},
		{"X: the 15-minute window and the 24-hour limits", header("Date", date, "x-rate-limit-limit", "900", "x-rate-limit-remaining", "899",
			"x-rate-limit-reset", epoch(15*time.Minute), "x-user-limit-24hour-limit", "100", "x-user-limit-24hour-remaining", "0",
			"x-user-limit-24hour-reset", epoch(3*time.Hour), "x-app-limit-24hour-limit", "10000", "x-app-limit-24hour-remaining", "9000",
			"x-app-limit-24hour-reset", epoch(20*time.Minute)),
			Said{Limit: 900, Remaining: 899, Reset: 15 * time.Minute, HasBudget: true, Dims: []Budget{
				{Name: "user-24hour", Limit: 100, Remaining: 0, Reset: MaxPause},
				{Name: "app-24hour", Limit: 10000, Remaining: 9000, Reset: 20 * time.Minute}}}},
		{"Shopify: the bucket's fill", header("X-Shopify-Shop-Api-Call-Limit", "32/40", "Retry-After", "2.0"),
			Said{RetryAfter: 2 * time.Second, HasRetryAfter: true, Dims: []Budget{{Name: "bucket", Limit: 40, Remaining: 8}}}},
		{"Salesforce: the org's allocation", header("Sforce-Limit-Info", "api-usage=10018/100000"),
			Said{Dims: []Budget{{Name: "api-usage", Limit: 100000, Remaining: 89982}}}},
		{"HubSpot: the burst window and the day", header("X-HubSpot-RateLimit-Max", "100", "X-HubSpot-RateLimit-Remaining", "97",
			"X-HubSpot-RateLimit-Interval-Milliseconds", "10000", "X-HubSpot-RateLimit-Daily", "250000", "X-HubSpot-RateLimit-Daily-Remaining", "0"),
			Said{Policies: []Policy{{100, 10 * time.Second}}, Remaining: 97, Reset: 10 * time.Second, HasBudget: true, Refills: true,
				Dims: []Budget{{Name: "daily", Limit: 250000, Remaining: 0}}}},
		{"HubSpot: the older per-second fields", header("X-HubSpot-RateLimit-Secondly", "10", "X-HubSpot-RateLimit-Secondly-Remaining", "9"),
			Said{Policies: []Policy{{10, time.Second}}, Remaining: 9, Reset: time.Second, HasBudget: true, Refills: true}},
		{"Reddit", header("X-Ratelimit-Used", "3", "X-Ratelimit-Remaining", "97.0", "X-Ratelimit-Reset", "42"),
			Said{Remaining: 97, Reset: 42 * time.Second, HasBudget: true}},
		{"Meta: business use cases", header("X-Business-Use-Case-Usage",
			`{"112233":[{"type":"ads_management","call_count":95,"total_cputime":20,"total_time":20,"estimated_time_to_regain_access":0}],`+
				`"445566":[{"type":"pages","call_count":100,"total_cputime":101,"total_time":30,"estimated_time_to_regain_access":7}]}`),
			Said{Usage: 101, HasUsage: true, Dims: []Budget{{Name: "business-use-case", Reset: 7 * time.Minute}}}},
		{"OpenAI: requests and tokens apart", header("x-ratelimit-limit-requests", "500", "x-ratelimit-remaining-requests", "499",
			"x-ratelimit-reset-requests", "120ms", "x-ratelimit-limit-tokens", "40000", "x-ratelimit-remaining-tokens", "0",
			"x-ratelimit-reset-tokens", "6m0s"),
			Said{Limit: 500, Remaining: 499, Reset: 120 * time.Millisecond, HasBudget: true, Refills: true,
				Dims: []Budget{{Name: "tokens", Limit: 40000, Remaining: 0, Reset: 6 * time.Minute, Refills: true}}}},
		{"Azure OpenAI: resets in seconds", header("x-ratelimit-remaining-requests", "12", "x-ratelimit-reset-requests", "7",
			"x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "0"),
			Said{Remaining: 12, Reset: 7 * time.Second, HasBudget: true, Refills: true}},
		{"Anthropic: four dimensions, RFC 3339 resets", header("Date", date,
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", refTime.Add(time.Second).Format(time.RFC3339),
			"anthropic-ratelimit-tokens-limit", "90000", "anthropic-ratelimit-tokens-remaining", "80000",
			"anthropic-ratelimit-tokens-reset", refTime.Add(6*time.Second).Format(time.RFC3339),
			"anthropic-ratelimit-input-tokens-limit", "40000", "anthropic-ratelimit-input-tokens-remaining", "0",
			"anthropic-ratelimit-input-tokens-reset", refTime.Add(20*time.Second).Format(time.RFC3339),
			"anthropic-ratelimit-output-tokens-limit", "8000", "anthropic-ratelimit-output-tokens-remaining", "8000",
			"anthropic-ratelimit-output-tokens-reset", refTime.Format(time.RFC3339), "retry-after", "20"),
			Said{RetryAfter: 20 * time.Second, HasRetryAfter: true, Limit: 50, Remaining: 49, Reset: time.Second, HasBudget: true, Refills: true,
				Dims: []Budget{
					{Name: "tokens", Limit: 90000, Remaining: 80000, Reset: 6 * time.Second, Refills: true},
					{Name: "input-tokens", Limit: 40000, Remaining: 0, Reset: 20 * time.Second, Refills: true},
					{Name: "output-tokens", Limit: 8000, Remaining: 8000, Refills: true}}}},
		{"malformed values are ignored", header("X-Shopify-Shop-Api-Call-Limit", "41/40", "Sforce-Limit-Info", "api-usage=x/5",
			"x-ratelimit-remaining-tokens", "5", "x-ratelimit-reset-tokens", "-1s", "X-RateLimit-Bucket", "a b",
			"X-Business-Use-Case-Usage", `{"1":[{"call_count":"many"}]}`),
			Said{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ReadHeaders(tc.h, now))
		})
	}
}

// Each dimension pauses the key until its own reset: a 429 on tokens waits
// for the tokens' reset, not the requests'; Retry-After still wins.
func TestLearnDimensions(t *testing.T) {
	t.Parallel()
	d := New([]contract.Limit{{N: 500, Per: time.Minute}}, testMargin, nil, nil)
	openAI := func(kv ...string) Said {
		s := ReadHeaders(header(append([]string{"x-ratelimit-remaining-requests", "499", "x-ratelimit-reset-requests", "120ms",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6s"}, kv...)...), refTime)
		s.Refused = true
		return s
	}
	assert.Equal(t, 6*time.Second, d.Learn(openAI()).Pause, "the tokens' reset")
	assert.Equal(t, 9*time.Second, d.Learn(openAI("retry-after", "9")).Pause, "Retry-After")
	ok := openAI()
	ok.Refused = false
	assert.Equal(t, contract.Learned{}, d.Learn(ok),
		"tokens refill continuously and the reset is the time until full: nothing left in a 200 pauses nothing")
	ok = ReadHeaders(header("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20s"), refTime)
	assert.Equal(t, contract.Learned{}, d.Learn(ok), "nor no request left")
	hubspot := ReadHeaders(header("X-HubSpot-RateLimit-Max", "100", "X-HubSpot-RateLimit-Remaining", "0",
		"X-HubSpot-RateLimit-Interval-Milliseconds", "10000"), refTime)
	assert.Zero(t, d.Learn(hubspot).Pause,
		"HubSpot's window rolls: its oldest request may leave it at once, so nothing left in a 200 pauses nothing")
	day := ReadHeaders(header("X-User-Limit-24hour-Remaining", "0", "X-User-Limit-24hour-Reset", "3600"), refTime)
	assert.Positive(t, d.Learn(day).Pause, "a day's budget with nothing left pauses until its reset")

	// Requests exhausted, tokens left: the requests' reset.
	s := ReadHeaders(header("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1.5",
		"x-ratelimit-remaining-tokens", "100", "x-ratelimit-reset-tokens", "30s"), refTime)
	s.Refused = true
	assert.Equal(t, 1500*time.Millisecond, d.Learn(s).Pause)

	// A dimension with units left, or no reset, changes nothing.
	s = ReadHeaders(header("X-Shopify-Shop-Api-Call-Limit", "40/40", "Sforce-Limit-Info", "api-usage=10/100"), refTime)
	assert.Equal(t, contract.Learned{}, d.Learn(s))
}

var dialectHeaders = []string{
	"X-Ratelimit-Remaining", "X-Ratelimit-Reset-After", "X-Ratelimit-Reset", "X-Ratelimit-Bucket", "X-Ratelimit-Global",
	"X-Ratelimit-Resource", "X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests",
	"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", "Anthropic-Ratelimit-Tokens-Remaining",
	"Anthropic-Ratelimit-Tokens-Reset", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset",
	"X-Rate-Limit-Remaining", "X-Rate-Limit-Reset", "X-User-Limit-24hour-Remaining", "X-User-Limit-24hour-Reset",
	"X-Shopify-Shop-Api-Call-Limit", "Sforce-Limit-Info", "X-Hubspot-Ratelimit-Max", "X-Hubspot-Ratelimit-Remaining",
	"X-Hubspot-Ratelimit-Interval-Milliseconds", "X-Hubspot-Ratelimit-Daily", "X-Hubspot-Ratelimit-Daily-Remaining",
	"X-Business-Use-Case-Usage", "Date",
}

// Whatever the dialects' headers say, nothing panics, every wait and count
// is bounded, and what a key learns is what a store accepts.
func FuzzReadDialects(f *testing.F) {
	f.Add("0", "64.57", "1470173023.123", "6m0s", `{"1":[{"call_count":100,"estimated_time_to_regain_access":1e300}]}`, "32/40")
	f.Add("-1", "1e9", "99999999999999999999.9", "1h-2m", `[]`, "api-usage=5/")
	f.Add("598.0", "0.001", "2026-11-21T12:00:01Z", "9223372036854775807ns", `{"a":[{}]}`, "0/0")
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g string) {
		vals := []string{a, b, c, d, e, g}
		h := http.Header{}
		for i, name := range dialectHeaders {
			h.Set(name, vals[i%len(vals)])
		}
		s := ReadHeaders(h, refTime)
		checkSaid(t, s)
		if len(s.Dims) > maxDims {
			t.Fatalf("too many dimensions: %+v", s)
		}
		for _, b := range s.Dims {
			if b.Remaining < 0 || b.Remaining > MaxCount || b.Limit < 0 || b.Reset < 0 || b.Reset > MaxPause {
				t.Fatalf("a dimension out of bounds: %+v", b)
			}
		}
		r := New([]contract.Limit{{N: 60, Per: time.Second}, {N: 5000, Per: time.Hour}}, testMargin, nil, nil)
		for _, refused := range []bool{false, true} {
			s.Refused = refused
			l := r.Learn(s)
			if l.Pause < 0 || l.Pause > MaxPause {
				t.Fatalf("learned a wait out of bounds: %+v", l)
			}
			if err := l.Validate("k"); err != nil {
				t.Fatalf("learned what a store refuses: %v", err)
			}
		}
	})
}
