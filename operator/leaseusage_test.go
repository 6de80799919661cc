package operator_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

// TestUsageInFlight: for a rule with InFlight, Usage reports the leases
// held and the requests waiting in the key's queue, and follows a lease
// handed over when a response body is closed.
func TestUsageInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := store.NewMemory()
		require.NoError(t, err)
		base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("body")), Request: r}, nil
		})
		tr, err := throttle.New(base, st, throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example", Key: throttle.Fixed("k"),
			Limits: []throttle.Limit{throttle.PerSecond(100)}, InFlight: 2}))
		require.NoError(t, err)
		get := func() *http.Response {
			req, _ := http.NewRequest("GET", "https://api.example/x", nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			return resp
		}
		ctx := context.Background()
		u, err := operator.Usage(ctx, tr, "api", "k")
		require.NoError(t, err)
		assert.Equal(t, [3]int{2, 0, 0}, [3]int{u.InFlight, u.Held, u.Queued})

		a, b := get(), get()
		third := make(chan *http.Response)
		go func() { third <- get() }()
		synctest.Wait() // the third waits in the queue
		u, err = operator.Usage(ctx, tr, "api", "k")
		require.NoError(t, err)
		assert.Equal(t, [3]int{2, 2, 1}, [3]int{u.InFlight, u.Held, u.Queued})
		assert.InDelta(t, 30*time.Second, u.HeldFor, float64(time.Second), "LeaseFor's default, from the first lease")

		require.NoError(t, a.Body.Close())
		c := <-third
		u, err = operator.Usage(ctx, tr, "api", "k")
		require.NoError(t, err)
		assert.Equal(t, [3]int{2, 2, 0}, [3]int{u.InFlight, u.Held, u.Queued}, "the lease handed over")
		require.NoError(t, b.Body.Close())
		require.NoError(t, c.Body.Close())
		u, err = operator.Usage(ctx, tr, "api", "k")
		require.NoError(t, err)
		assert.Zero(t, u.Held)
	})
}

// TestLimiterUsage: a Limiter's key reads as a Transport's does.
func TestLimiterUsage(t *testing.T) {
	st, err := store.NewMemory()
	require.NoError(t, err)
	l, err := throttle.NewLimiter(st, throttle.Rule{Name: "jobs", Limits: []throttle.Limit{throttle.PerMinute(10)}, NoDefaultPace: true},
		throttle.WithKeySecret(secret))
	require.NoError(t, err)
	ctx := context.Background()
	for range 3 {
		require.NoError(t, l.Wait(ctx, "queue-1", 1))
	}
	u, err := operator.LimiterUsage(ctx, l, "queue-1")
	require.NoError(t, err)
	require.Len(t, u.Limits, 1)
	assert.Equal(t, 3, u.Limits[0].Used+u.Limits[0].Reserved, "recorded a little ahead, by the allowance of a process that measured nothing yet")
	assert.Equal(t, throttle.Per(10, time.Minute+defaultMargin), u.Limits[0].Limit)
	assert.Zero(t, u.InFlight)
	u, err = operator.LimiterUsage(ctx, l, "queue-2")
	require.NoError(t, err)
	assert.Zero(t, u.Limits[0].Used+u.Limits[0].Reserved)
	_, err = operator.LimiterUsage(ctx, l, "")
	assert.True(t, isA[*throttle.KeyError](err), "%v", err)
	_, err = operator.LimiterUsage(ctx, nil, "k")
	assert.Error(t, err)
}
