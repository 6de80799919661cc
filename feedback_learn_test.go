package throttle

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// X-RateLimit-Limit is read as a limit over the rule's longest window only
// from half of that window's configured N: a GCRA or a token bucket sends
// its burst there, and a learned limit must not hold the fleet far below
// its configured rate.
func TestLearnXRateLimitLimit(t *testing.T) {
	r, err := compile(Rule{Host: "h", Limits: []Limit{PerSecond(100)}}, false)
	require.NoError(t, err)
	sec := time.Second + DefaultMargin
	for _, c := range []struct {
		name      string
		throttled bool
		kv        []string
		limit     Limit
		pause     time.Duration
	}{
		{"throttled GCRA burst 0, 429: a pause, no limit", true,
			[]string{"Retry-After", "1", "X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"}, Limit{}, time.Second},
		{"throttled GCRA burst 0, 200: nothing", false,
			[]string{"X-RateLimit-Limit", "1", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"}, Limit{}, 0},
		{"a bucket of 10 in the older draft's field: nothing", false,
			[]string{"RateLimit-Limit", "10", "RateLimit-Remaining", "3", "RateLimit-Reset", "1"}, Limit{}, 0},
		{"49: a burst size", false, []string{"X-RateLimit-Limit", "49"}, Limit{}, 0},
		{"50: a limit per window", false, []string{"X-RateLimit-Limit", "50"}, Limit{N: 50, Per: sec}, 0},
		{"80 on a 429: a limit per window and a pause", true,
			[]string{"Retry-After", "1", "X-RateLimit-Limit", "80"}, Limit{N: 80, Per: sec}, time.Second},
		{"throttled GCRA burst 99 (100): implied, nothing", false,
			[]string{"X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"}, Limit{}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i < len(c.kv); i += 2 {
				h.Set(c.kv[i], c.kv[i+1])
			}
			l := r.learn(parseSignals(h, refTime), c.throttled)
			assert.Equal(t, c.limit, Limit(l.Limit))
			assert.Equal(t, c.pause, l.Pause)
		})
	}
	// Over the longest window, against its N.
	r, err = compile(Rule{Host: "h", Limits: []Limit{PerSecond(100), PerHour(5000)}}, false)
	require.NoError(t, err)
	for n, want := range map[int]Limit{2499: {}, 2500: {N: 2500, Per: time.Hour + DefaultMargin}} {
		l := r.learn(parseSignals(http.Header{"X-Ratelimit-Limit": {strconv.Itoa(n)}}, refTime), false)
		assert.Equal(t, want, Limit(l.Limit), "X-RateLimit-Limit %d under PerHour(5000)", n)
	}
}
