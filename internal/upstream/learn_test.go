package upstream

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/throttle-go/throttle/internal/contract"
)

// X-RateLimit-Limit is read as a limit over the rule's longest window only
// from half of that window's configured N: a GCRA or a token bucket sends
// its burst there, and a learned limit must not hold the fleet far below
// its configured rate.
func TestLearnXRateLimitLimit(t *testing.T) {
	r := New([]contract.Limit{{N: 100, Per: time.Second}}, testMargin, nil, nil)
	sec := time.Second + testMargin
	for _, c := range []struct {
		name      string
		throttled bool
		kv        []string
		limit     contract.Limit
		pause     time.Duration
	}{
		{"throttled GCRA burst 0, 429: a pause, no limit", true,
			[]string{"Retry-After", "1", "X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"}, contract.Limit{}, time.Second},
		{"throttled GCRA burst 0, 200: nothing", false,
			[]string{"X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"}, contract.Limit{}, 0},
		{"a bucket of 10 in the older draft's field: nothing", false,
			[]string{"RateLimit-Limit", "10", "RateLimit-Remaining", "3", "RateLimit-Reset", "1"}, contract.Limit{}, 0},
		{"49: a burst size", false, []string{"X-RateLimit-Limit", "49"}, contract.Limit{}, 0},
		{"50: a limit per window", false, []string{"X-RateLimit-Limit", "50"}, contract.Limit{N: 50, Per: sec}, 0},
		{"80 on a 429: a limit per window and a pause", true,
			[]string{"Retry-After", "1", "X-RateLimit-Limit", "80"}, contract.Limit{N: 80, Per: sec}, time.Second},
		{"throttled GCRA burst 99 (100): implied, nothing", false,
			[]string{"X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"}, contract.Limit{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i < len(c.kv); i += 2 {
				h.Set(c.kv[i], c.kv[i+1])
			}
			sig := ReadHeaders(h, refTime)
			sig.Refused = c.throttled
			l := r.Learn(sig)
			assert.Equal(t, c.limit, l.Limit)
			assert.Equal(t, c.pause, l.Pause)
		})
	}
	// Over the longest window, against its N.
	r = New([]contract.Limit{{N: 100, Per: time.Second}, {N: 5000, Per: time.Hour}}, testMargin, nil, nil)
	for n, want := range map[int]contract.Limit{2499: {}, 2500: {N: 2500, Per: time.Hour + testMargin}} {
		l := r.Learn(ReadHeaders(http.Header{"X-Ratelimit-Limit": {strconv.Itoa(n)}}, refTime))
		assert.Equal(t, want, l.Limit, "X-RateLimit-Limit %d under PerHour(5000)", n)
	}
}

// The usage Meta reports: from 80% the key's sends are spread over its
// window at no less than 99% of its rate (a fleet alone at its full rate
// keeps the usage at 99–100%: less would cut it for nothing), and at 100%
// it pauses for what the API states (estimated_time_to_regain_access) or,
// without it, a hundredth of the window per percent over 99, not a fixed 5
// minutes.
func TestLearnUsage(t *testing.T) {
	r := New([]contract.Limit{{N: 400, Per: time.Hour}}, testMargin, nil, nil)
	span := 6*time.Minute + testMargin
	// 40 per 6 minutes at the rate; a share of it lengthens the part.
	at := func(share float64) time.Duration {
		return time.Duration(math.Ceil(float64(6*time.Minute)/share/float64(time.Millisecond)))*time.Millisecond + testMargin
	}
	for _, c := range []struct {
		name  string
		kv    []string
		limit contract.Limit
		pause time.Duration
	}{
		{"79%: nothing", []string{"X-App-Usage", `{"call_count":79}`}, contract.Limit{}, 0},
		{"80%: the rate, spread", []string{"X-App-Usage", `{"call_count":80}`}, contract.Limit{N: 40, Per: span}, 0},
		{"90%: 99.5% of the rate", []string{"X-App-Usage", `{"call_count":90}`}, contract.Limit{N: 40, Per: at(1 - 0.01*10/19)}, 0},
		{"99%: 99% of the rate", []string{"X-App-Usage", `{"call_count":99}`}, contract.Limit{N: 40, Per: at(0.99)}, 0},
		{"99.5%: no less", []string{"X-App-Usage", `{"call_count":99.5}`}, contract.Limit{N: 40, Per: at(0.99)}, 0},
		{"100%: a hundredth of the window", []string{"X-App-Usage", `{"call_count":100}`}, contract.Limit{}, 36 * time.Second},
		{"110%: eleven hundredths", []string{"X-App-Usage", `{"call_count":110}`}, contract.Limit{}, 11 * 36 * time.Second},
		{"100% with a time to regain access: that time", []string{"X-Business-Use-Case-Usage",
			`{"1":[{"call_count":100,"estimated_time_to_regain_access":2}]}`}, contract.Limit{}, 2 * time.Minute},
		{"a refusal at 100%: a hundredth of the window, not a window", []string{"X-App-Usage", `{"call_count":100}`, "Refused", "1"},
			contract.Limit{}, 36 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i < len(c.kv); i += 2 {
				h.Set(c.kv[i], c.kv[i+1])
			}
			sig := ReadHeaders(h, refTime)
			sig.Refused = h.Get("Refused") != ""
			l := r.Learn(sig)
			assert.Equal(t, c.limit, l.Limit)
			assert.Equal(t, c.pause, l.Pause)
			if c.limit.N > 0 {
				// Two windows: a fleet whose own log is full sends
				// nothing for up to a window, and its spread sends
				// take up to another to bring the usage back over
				// 80%; a limit lapsing sooner lets it burst again.
				assert.Equal(t, 2*(time.Hour+testMargin), l.LimitTTL, "lapses two windows after the usage was last high")
			}
		})
	}
}

// A Discord route's bucket is learned from its first response (remaining
// one below its limit, Reset-After its whole window) as a limit the whole
// fleet keeps, over the bucket's window; later responses of the bucket add
// no budget, which would count the sends placed under it twice, but an
// empty one pauses. A bucket larger than the rule's log keeps is learned
// as a pace.
func TestLearnRouteBucket(t *testing.T) {
	r := New([]contract.Limit{{N: 50, Per: time.Second}}, testMargin, nil, nil)
	bucket := func(limit, remaining, resetAfter string) http.Header {
		return http.Header{"X-Ratelimit-Limit": {limit}, "X-Ratelimit-Remaining": {remaining},
			"X-Ratelimit-Reset-After": {resetAfter}, "X-Ratelimit-Bucket": {"abcd"}}
	}
	l := r.Learn(ReadHeaders(bucket("5", "4", "5.000"), refTime))
	assert.Equal(t, contract.Limit{N: 5, Per: 5*time.Second + testMargin}, l.Limit)
	assert.Equal(t, 10*time.Minute, l.LimitTTL)
	assert.Zero(t, l.Pace)
	assert.Zero(t, l.Reset, "no budget")

	l = r.Learn(ReadHeaders(bucket("60", "59", "5.000"), refTime))
	assert.Equal(t, contract.Limit{N: 60, Per: 5*time.Second + testMargin, Paced: true}, l.Pace, "more than the log keeps: a pace")
	assert.Equal(t, 10*time.Minute, l.PaceTTL)
	assert.Zero(t, l.Limit)
	bucket5 := func(remaining, resetAfter string) http.Header { return bucket("5", remaining, resetAfter) }

	l = r.Learn(ReadHeaders(bucket5("2", "3.5"), refTime))
	assert.Equal(t, contract.Learned{}, l, "a later response: nothing new")

	refused := func(retryAfter, resetAfter string, global bool) Said {
		h := bucket5("0", resetAfter)
		h.Set("Retry-After", retryAfter)
		if global {
			h.Set("X-Ratelimit-Global", "true")
		}
		sig := ReadHeaders(h, refTime)
		sig.Refused = true
		return sig
	}
	assert.Equal(t, 2780*time.Millisecond, r.Learn(refused("3", "2.780", false)).Pause, "a 429: the bucket's exact reset, not Retry-After rounded up")
	assert.Equal(t, 300*time.Millisecond, r.Learn(refused("1", "0.300", false)).Pause)
	assert.Equal(t, 5*time.Second, r.Learn(refused("5", "2.780", false)).Pause, "a longer wait than the bucket's is kept")
	assert.Equal(t, 3*time.Second, r.Learn(refused("3", "2.780", true)).Pause, "a global limit's is kept")

	l = r.Learn(ReadHeaders(bucket5("0", "3.5"), refTime))
	assert.Equal(t, contract.Learned{Pause: 3500 * time.Millisecond}, l, "empty: a pause to its reset")
}
