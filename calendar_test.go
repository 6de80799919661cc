package throttle_test

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestDailyAcrossDST: a daily quota in Los Angeles starts afresh at each
// midnight there, on the day daylight saving time begins (23 hours) and
// the day after, on a fake clock. A quota counted in days of 24 hours from
// a fixed offset would still count the new day's first requests in the
// old one.
func TestDailyAcrossDST(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	synctest.Test(t, func(t *testing.T) {
		rule := throttle.Rule{
			Host: "api.example.com", Key: throttle.Fixed("project"), FailFast: true, NoDefaultPace: true,
			Limits: []throttle.Limit{throttle.PerSecond(100)},
			Also:   []throttle.KeyLimit{throttle.Daily(2, la, throttle.Fixed("project"))},
		}
		var sent sendLog
		tr := newTransport(t, sent.base(), newMemory(t), throttle.WithRule(rule))
		get := func() error {
			req, err := http.NewRequest(http.MethodGet, "https://api.example.com/x", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}
		at := func(when time.Time) {
			time.Sleep(time.Until(when))
		}
		day := func(when string) {
			t.Helper()
			require.NoError(t, get(), "the first of %s", when)
			require.NoError(t, get(), "the second of %s", when)
			require.ErrorIs(t, get(), throttle.ErrLimited, "a third on %s", when)
		}
		at(time.Date(2000, 4, 1, 23, 59, 0, 0, la))
		day("the last minute of April 1")
		at(time.Date(2000, 4, 2, 0, 0, 1, 0, la)) // PST; DST begins at 2:00
		day("April 2, from its midnight")
		at(time.Date(2000, 4, 2, 23, 59, 0, 0, la)) // PDT: 22:59 at the old offset
		require.ErrorIs(t, get(), throttle.ErrLimited, "April 2's quota is spent at its end")
		at(time.Date(2000, 4, 3, 0, 0, 1, 0, la)) // 23:00:01 at the old offset
		day("April 3, from its midnight after a 23-hour day")
		require.Equal(t, 6, sent.count())
	})
}
