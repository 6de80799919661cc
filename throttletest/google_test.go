package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoogleMaps: N per minute per key, the minutes aligned at second 00;
// a refusal is a 200 whose body says OVER_QUERY_LIMIT.
func TestGoogleMaps(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0).Truncate(time.Minute).Add(50 * time.Second)}
	u, err := NewGoogleMaps(Config{N: 2, Window: time.Minute, Now: clock.Now})
	require.NoError(t, err)
	geocode := func(key string) (int, string) {
		resp := call(u, http.MethodGet, "/maps/api/geocode/json?address=x&key="+key).Result()
		return resp.StatusCode, body(t, resp)
	}
	for range 2 {
		code, b := geocode("k")
		require.Equal(t, 200, code)
		assert.JSONEq(t, `{"results":[],"status":"OK"}`, b)
	}
	code, b := geocode("k")
	assert.Equal(t, 200, code, "a refusal is a 200")
	assert.Contains(t, b, `"status":"OVER_QUERY_LIMIT"`)
	_, b = geocode("other")
	assert.Contains(t, b, `"status":"OK"`, "another key")
	clock.Add(9*time.Second + 999*time.Millisecond)
	_, b = geocode("k")
	assert.Contains(t, b, "OVER_QUERY_LIMIT", "1ms before second 00")
	clock.Add(time.Millisecond)
	_, b = geocode("k")
	assert.Contains(t, b, `"status":"OK"`, "at second 00, 10s after the first request")
	st := u.Stats()
	assert.Equal(t, 3, st.Keys["k"].Accepted)
	assert.Equal(t, 2, st.Keys["k"].Rejected)
}
