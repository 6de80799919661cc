package upstream

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/throttle-go/throttle/internal/contract"
)

// testMargin is the rules' margin in these tests: throttle's default.
const testMargin = 5 * time.Millisecond

var refTime = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    string
		want time.Duration
		ok   bool
	}{
		{"seconds", "120", 2 * time.Minute, true},
		{"zero", "0", 0, true},
		{"fractional seconds", "1.5", 1500 * time.Millisecond, true},
		{"spaces", "  3 ", 3 * time.Second, true},
		{"HTTP date", refTime.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"RFC 850 date", refTime.Add(10 * time.Second).Format("Monday, 02-Jan-06 15:04:05 GMT"), 10 * time.Second, true},
		{"date in the past", refTime.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"far-future date is capped", refTime.Add(1000 * time.Hour).Format(http.TimeFormat), MaxPause, true},
		{"huge seconds are capped", "99999999999999999999999", MaxPause, true},
		{"negative", "-5", 0, false},
		{"plus sign", "+5", 0, false},
		{"exponent", "1e3", 0, false},
		{"hex", "0x10", 0, false},
		{"NaN", "NaN", 0, false},
		{"Inf", "Inf", 0, false},
		{"trailing dot", "5.", 0, false},
		{"leading dot", ".5", 0, false},
		{"two dots", "1.2.3", 0, false},
		{"garbage", "soon", 0, false},
		{"empty", "", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseRetryAfter(tc.v, func() time.Time { return refTime })
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseSignals(t *testing.T) {
	t.Parallel()
	// The client's clock is 10 minutes fast: dates are read against the
	// response's Date header, not against it.
	now := refTime.Add(10 * time.Minute)
	date := refTime.Format(http.TimeFormat)
	epoch := func(d time.Duration) string { return itoa(refTime.Add(d).Unix()) }
	tests := []struct {
		name string
		h    http.Header
		want Said
	}{
		{"nothing", header(), Said{}},
		{"Retry-After date against the response's Date",
			header("Date", date, "Retry-After", refTime.Add(30*time.Second).Format(http.TimeFormat)),
			Said{RetryAfter: 30 * time.Second, HasRetryAfter: true}},
		{"GitHub: epoch reset against Date",
			header("Date", date, "X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "42", "X-RateLimit-Reset", epoch(20*time.Minute)),
			Said{Limit: 5000, Remaining: 42, Reset: 20 * time.Minute, HasBudget: true}},
		{"delta-seconds reset",
			header("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "30"),
			Said{Limit: 100, Remaining: 0, Reset: 30 * time.Second, HasBudget: true}},
		{"a reset in the past is now",
			header("Date", date, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(-time.Minute)),
			Said{Remaining: 0, Reset: 0, HasBudget: true}},
		{"a far-future reset is capped",
			header("Date", date, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(100*24*time.Hour)),
			Said{Remaining: 0, Reset: MaxPause, HasBudget: true}},
		{"negative and malformed counts are ignored",
			header("X-RateLimit-Limit", "-1", "X-RateLimit-Remaining", "many", "X-RateLimit-Reset", "10"),
			Said{}},
		{"older draft fields",
			header("RateLimit-Limit", "10", "RateLimit-Remaining", "3", "RateLimit-Reset", "7"),
			Said{Limit: 10, Remaining: 3, Reset: 7 * time.Second, HasBudget: true}},
		{"IETF policy and limit",
			header("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`, "RateLimit", `"burst";r=50;t=30`),
			Said{Policies: []Policy{{100, time.Minute}, {1000, 24 * time.Hour}}, Remaining: 50, Reset: 30 * time.Second, HasBudget: true}},
		{"IETF: tokens, several fields, the fewest remaining",
			header("RateLimit-Policy", `default;q=10;w=1`, "RateLimit-Policy", `slow;q=100;w=60`, "RateLimit", `a;r=5;t=1, b;r=2;t=9`),
			Said{Policies: []Policy{{10, time.Second}, {100, time.Minute}}, Remaining: 2, Reset: 9 * time.Second, HasBudget: true}},
		{"IETF: other quota units and broken items are skipped",
			header("RateLimit-Policy", `"bytes";q=1;w=1;qu="content-bytes", "x";q=-1;w=5, "y";q=5;w=0, "ok";q=7;w=2`),
			Said{Policies: []Policy{{7, 2 * time.Second}}}},
		{"IETF: quoted commas and semicolons stay in their string",
			header("RateLimit-Policy", `"a,b;c";q=3;w=1`),
			Said{Policies: []Policy{{3, time.Second}}}},
		{"X-App-Usage", header("X-App-Usage", `{"call_count":28,"total_time":91.5,"total_cputime":25}`),
			Said{Usage: 91.5, HasUsage: true}},
		{"X-App-Usage capped, negatives ignored", header("X-App-Usage", `{"call_count":1e9,"total_time":-4}`),
			Said{Usage: 1000, HasUsage: true}},
		{"X-App-Usage malformed", header("X-App-Usage", `{"call_count":"lots"`), Said{}},
		{"Discord: an epoch reset with a fraction is an epoch",
			header("Date", date, "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epoch(3*time.Second)+".250"),
			Said{Limit: 5, Remaining: 0, Reset: 3250 * time.Millisecond, HasBudget: true}},
		{"Reddit: a remaining count with a fraction",
			header("X-Ratelimit-Used", "2", "X-Ratelimit-Remaining", "598.0", "X-Ratelimit-Reset", "412"),
			Said{Remaining: 598, Reset: 412 * time.Second, HasBudget: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ReadHeaders(tc.h, now))
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// checkSaid is the fuzzers' invariant: whatever the headers say, every
// duration is within [0, MaxPause] (a learned window within maxWindow),
// every count within [0, MaxCount], a usage within [0, 1000].
func checkSaid(t *testing.T, s Said) {
	t.Helper()
	if s.RetryAfter < 0 || s.RetryAfter > MaxPause || s.Reset < 0 || s.Reset > MaxPause {
		t.Fatalf("a wait outside [0, %s]: %+v", MaxPause, s)
	}
	for _, p := range s.Policies {
		if p.Q < 1 || p.Q > MaxCount || p.W < time.Second || p.W > maxWindow {
			t.Fatalf("a policy out of bounds: %+v", s)
		}
	}
	if len(s.Policies) > 8 || s.Limit < 0 || s.Limit > MaxCount || s.Remaining < 0 || s.Remaining > MaxCount {
		t.Fatalf("a limit out of bounds: %+v", s)
	}
	if s.Usage < 0 || s.Usage > 1000 {
		t.Fatalf("a usage out of bounds: %+v", s)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "1.5", "0", "-1", "1e9", "Wed, 21 Oct 2015 07:28:00 GMT", "99999999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, func() time.Time { return refTime })
		if d < 0 || d > MaxPause || !ok && d != 0 {
			t.Fatalf("parseRetryAfter(%q) = %s, %v", v, d, ok)
		}
	})
}

func FuzzParseSignals(f *testing.F) {
	f.Add("120", "5000", "42", "1763726400", `"burst";q=100;w=60`, `"burst";r=50;t=30`, `{"call_count":28}`, "Sat, 21 Nov 2026 12:00:00 GMT")
	f.Add("", "-1", "x", "-5", `a;q=;w=`, `;;;,,,"`, `[]`, "")
	f.Add("1.25", "0", "0", "0", `"a\"b";q=1;w=1`, `b;r=0;t=99999999999`, `{"total_time":1e308}`, "garbage")
	f.Fuzz(func(t *testing.T, retry, limit, remaining, reset, policy, rl, usage, date string) {
		h := header("Retry-After", retry, "X-RateLimit-Limit", limit, "X-RateLimit-Remaining", remaining,
			"X-RateLimit-Reset", reset, "RateLimit-Policy", policy, "RateLimit", rl, "X-App-Usage", usage,
			"RateLimit-Limit", limit, "RateLimit-Remaining", remaining, "RateLimit-Reset", reset, "Date", date)
		s := ReadHeaders(h, refTime)
		checkSaid(t, s)
		// What the rule learns from it is bounded too.
		r := New([]contract.Limit{{N: 60, Per: time.Second}, {N: 5000, Per: time.Hour}}, testMargin, nil, nil)
		for _, throttled := range []bool{false, true} {
			s.Refused = throttled
			l := r.Learn(s)
			if l.Pause < 0 || l.Pause > MaxPause || l.Reset < 0 || l.Reset > MaxPause {
				t.Fatalf("learned a wait out of bounds: %+v from %+v", l, s)
			}
			if l.Limit.N < 0 || l.Limit.N > 0 && l.Limit.Per > time.Hour+testMargin {
				t.Fatalf("learned a limit beyond the rule's longest window: %+v", l)
			}
			if err := l.Validate("k"); err != nil {
				t.Fatalf("learned what a store refuses: %v", err)
			}
		}
	})
}

// BenchmarkParseSignals measures what listening costs a response: nothing
// to say (most responses), and a full set of headers.
func BenchmarkParseSignals(b *testing.B) {
	full := header("Date", refTime.Format(http.TimeFormat), "X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "42",
		"X-RateLimit-Reset", "1763726400", "RateLimit-Policy", `"default";q=40;w=1`, "RateLimit", `"default";r=3;t=1`)
	for name, h := range map[string]http.Header{"no headers": {"Content-Type": {"application/json"}}, "all headers": full} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				_ = ReadHeaders(h, refTime)
			}
		})
	}
}

// Reading a response that states no limit allocates nothing: every response
// a rule sees passes here.
func TestReadHeadersOfAPlainResponseAllocatesNothing(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}, "Date": {"Sat, 21 Nov 2026 12:00:00 GMT"}}
	allocs := testing.AllocsPerRun(100, func() { _ = ReadHeaders(h, refTime) })
	assert.Zero(t, allocs)
}
