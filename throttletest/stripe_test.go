package throttletest

import (
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStripeRate: a token bucket of N refilled at N per Window per key; a
// refusal is a 429 with Stripe-Rate-Limited-Reason.
func TestStripeRate(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	u, err := NewStripe(Config{N: 4, Window: time.Second, Now: clock.Now})
	require.NoError(t, err)
	get := func() *http.Response {
		return call(u, http.MethodGet, "/v1/charges", "Authorization", "Bearer sk").Result()
	}
	for i := range 4 {
		require.Equal(t, 200, get().StatusCode, i)
	}
	resp := get()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "global-rate", resp.Header.Get("Stripe-Rate-Limited-Reason"))
	assert.Contains(t, body(t, resp), `"code":"rate_limit"`)
	clock.Add(249 * time.Millisecond)
	require.Equal(t, http.StatusTooManyRequests, get().StatusCode)
	clock.Add(time.Millisecond)
	require.Equal(t, 200, get().StatusCode, "one refilled every 250ms")
	require.Equal(t, http.StatusTooManyRequests, get().StatusCode)
	assert.Equal(t, 200, call(u, http.MethodGet, "/v1/charges", "Authorization", "Bearer other").Code)
}

// TestStripeLock: a change to an object another request is changing is a
// 429 lock_timeout without Stripe-Rate-Limited-Reason, counted neither way.
func TestStripeLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, err := NewStripe(Config{ServiceTime: time.Second})
		require.NoError(t, err)
		post := func(path string) *http.Response {
			return call(u, http.MethodPost, path, "Authorization", "Bearer sk").Result()
		}
		var wg sync.WaitGroup
		wg.Go(func() { assert.Equal(t, 200, post("/v1/charges/ch_1").StatusCode) })
		synctest.Wait()
		resp := post("/v1/charges/ch_1")
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Empty(t, resp.Header.Get("Stripe-Rate-Limited-Reason"))
		assert.Equal(t, "true", resp.Header.Get("Stripe-Should-Retry"))
		assert.Contains(t, body(t, resp), `"code":"lock_timeout"`)
		start := time.Now()
		assert.Equal(t, 200, call(u, http.MethodGet, "/v1/charges/ch_1", "Authorization", "Bearer sk").Code, "a read takes no lock")
		assert.Equal(t, time.Second, time.Since(start))
		wg.Wait()
		assert.Equal(t, 200, post("/v1/charges/ch_1").StatusCode, "the lock is released")
		st := u.Stats().Keys["Bearer sk"]
		assert.Equal(t, 3, st.Accepted)
		assert.Zero(t, st.Rejected)
	})
}
