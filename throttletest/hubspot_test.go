package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHubSpot: N per rolling Window and 2,500×N a day (from midnight UTC),
// both in X-HubSpot-RateLimit-*, refused with 429 naming the policy.
func TestHubSpot(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 5, 1, 23, 59, 0, 0, time.UTC)}
	u, err := NewHubSpot(Config{N: 2, Window: 10 * time.Second, Now: clock.Now})
	require.NoError(t, err)
	get := func(token string) *httpResult {
		return result(call(u, http.MethodGet, "/crm/v3/objects/contacts", "Authorization", token))
	}
	first := get("Bearer a")
	require.Equal(t, 200, first.code)
	for name, want := range map[string]string{"Max": "2", "Remaining": "1", "Interval-Milliseconds": "10000", "Daily": "5000", "Daily-Remaining": "4999"} {
		assert.Equal(t, want, first.header.Get("X-Hubspot-Ratelimit-"+name), name)
	}
	clock.Add(5 * time.Second)
	require.Equal(t, 200, get("Bearer a").code)
	over := get("Bearer a")
	require.Equal(t, http.StatusTooManyRequests, over.code)
	assert.Contains(t, over.body, `"policyName":"TEN_SECONDLY_ROLLING"`)
	assert.Equal(t, 200, get("Bearer b").code, "another app")
	clock.Add(5 * time.Second)
	resp := get("Bearer a")
	require.Equal(t, 200, resp.code, "the first left the 10 seconds")
	assert.Equal(t, "4997", resp.header.Get("X-Hubspot-Ratelimit-Daily-Remaining"))
	clock.Add(time.Minute)
	assert.Equal(t, "4999", get("Bearer a").header.Get("X-Hubspot-Ratelimit-Daily-Remaining"), "a new day at midnight UTC")

	// The daily limit, on a fake of N 1: 2,500 a day.
	u, err = NewHubSpot(Config{N: 1, Window: time.Millisecond, Now: clock.Now})
	require.NoError(t, err)
	for i := range 2500 {
		require.Equal(t, 200, call(u, http.MethodGet, "/x", "Authorization", "a").Code, i)
		clock.Add(time.Millisecond)
	}
	day := result(call(u, http.MethodGet, "/x", "Authorization", "a"))
	require.Equal(t, http.StatusTooManyRequests, day.code)
	assert.Contains(t, day.body, `"policyName":"DAILY"`)
}
