package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShopify: a leaky bucket of 40 leaking 2 per second, its fill in
// X-Shopify-Shop-Api-Call-Limit; a full bucket answers 429 with a
// fractional Retry-After.
func TestShopify(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	u, err := NewShopify(Config{Now: clock.Now})
	require.NoError(t, err)
	get := func() *http.Response {
		return call(u, http.MethodGet, "/admin/api/2026-01/orders.json", "X-Shopify-Access-Token", "shpat").Result()
	}
	for i := range 40 {
		resp := get()
		require.Equal(t, 200, resp.StatusCode, i)
		assert.Equal(t, itoa(i+1)+"/40", resp.Header.Get("X-Shopify-Shop-Api-Call-Limit"))
	}
	resp := get()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "0.5", resp.Header.Get("Retry-After"))
	assert.Equal(t, "40/40", resp.Header.Get("X-Shopify-Shop-Api-Call-Limit"))
	clock.Add(time.Second)
	resp = get()
	require.Equal(t, 200, resp.StatusCode, "two leaked")
	assert.Equal(t, "39/40", resp.Header.Get("X-Shopify-Shop-Api-Call-Limit"))
	require.Equal(t, 200, get().StatusCode)
	require.Equal(t, http.StatusTooManyRequests, get().StatusCode)
	clock.Add(20 * time.Second)
	resp = get()
	assert.Equal(t, "1/40", resp.Header.Get("X-Shopify-Shop-Api-Call-Limit"), "empty after 20s")
}
