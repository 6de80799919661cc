package throttletest

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewServerTimesArrivalAtSocket: a request served by NewServer arrives
// when it reached the socket, not when the Upstream got round to it: here
// its handler is held until after the test read the clock, and the arrival
// is still before that reading, and after the client began to send.
func TestNewServerTimesArrivalAtSocket(t *testing.T) {
	t.Parallel()
	up, err := NewUpstream(Config{N: 10, Window: time.Hour, Also: []Config{{N: 10, Window: time.Hour}}})
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		up.ServeHTTP(w, r)
	}))
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()

	for range 2 { // a new connection, then the same one again
		sent := time.Now()
		done := make(chan int)
		go func() {
			resp, err := client.Get(srv.URL)
			if !assert.NoError(t, err) {
				done <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			done <- resp.StatusCode
		}()
		<-entered
		held := time.Now() // the request has reached the handler: it arrived before
		close(release)
		require.Equal(t, http.StatusOK, <-done)
		release = make(chan struct{})

		arrivals := up.Stats().Total.Arrivals
		require.NotEmpty(t, arrivals)
		at := arrivals[len(arrivals)-1]
		assert.True(t, at.Before(held), "arrival %s is not before the handler ran (%s)", at.Format(time.StampNano), held.Format(time.StampNano))
		assert.False(t, at.Before(sent.Round(0).Add(-time.Microsecond)), "arrival %s before the request was sent (%s)", at.Format(time.StampNano), sent.Format(time.StampNano))
		assert.Equal(t, arrivals, up.Also(0).Stats().Total.Arrivals, "the tiers count the same arrival")
	}
}

// TestArrivalsDecidedOutOfOrder: arrivals timed by NewServer may be decided
// in another order than they arrived; each algorithm accepts one only if the
// accepted arrivals, it included, still keep the limit in arrival order.
func TestArrivalsDecidedOutOfOrder(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_700_000_000, 0)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		cfg    Config
		decide []int  // arrival times (ms), in the order they are decided
		want   []bool // accepted
	}{
		{
			name:   "sliding log",
			cfg:    Config{N: 2, Window: time.Second},
			decide: []int{1000, 1500, 200, 800, 2100},
			// 200 fits before 1000 and 1500 (1300 apart); 800 would make
			// 200, 800 and 1000 three within a second.
			want: []bool{true, true, true, false, true},
		},
		{
			name:   "gcra",
			cfg:    Config{N: 10, Window: time.Second, Algorithm: GCRA},
			decide: []int{500, 300, 350, 200, 150},
			// 300 and 200 are a spacing (100) before the next; 350 is
			// 50 after 300; 150 would leave 200 only 50 after it.
			want: []bool{true, true, false, true, false},
		},
		{
			name:   "fixed window",
			cfg:    Config{N: 1, Window: time.Second, Algorithm: FixedWindow},
			decide: []int{1500, 500, 700, 1200},
			// 500 opens the window before 1500's; 1200 is in 1500's.
			want: []bool{true, true, false, false},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, err := NewUpstream(tc.cfg)
			require.NoError(t, err)
			var got []bool
			for _, at := range tc.decide {
				_, ok, _, _, _ := up.arrive("k", ms(at))
				got = append(got, ok)
			}
			assert.Equal(t, tc.want, got)
			ks := up.Stats().Keys["k"]
			assert.IsNonDecreasing(t, ks.Arrivals)
			assert.IsNonDecreasing(t, ks.RejectedAt)
		})
	}
}
