package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestX: each endpoint's window per token, opened by its first request and
// reset at the epoch it announces; posts also count against the 24-hour
// limit of x-user-limit-24hour-*.
func TestX(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 500_000_000)}
	u, err := NewX(Config{N: 2, Window: 15 * time.Minute, Now: clock.Now})
	require.NoError(t, err)
	send := func(method, path, token string) *httpResult {
		return result(call(u, method, path, "Authorization", token))
	}
	first := send(http.MethodGet, "/2/tweets/1460323737035677698", "Bearer a")
	require.Equal(t, 200, first.code)
	assert.Equal(t, "2", first.header.Get("X-Rate-Limit-Limit"))
	assert.Equal(t, "1", first.header.Get("X-Rate-Limit-Remaining"))
	assert.Equal(t, "1700000900", first.header.Get("X-Rate-Limit-Reset"))
	assert.Empty(t, first.header.Get("X-User-Limit-24hour-Limit"))
	require.Equal(t, 200, send(http.MethodGet, "/2/tweets/20", "Bearer a").code, "the same endpoint, another id")
	over := send(http.MethodGet, "/2/tweets/21", "Bearer a")
	require.Equal(t, http.StatusTooManyRequests, over.code)
	assert.Equal(t, "0", over.header.Get("X-Rate-Limit-Remaining"))
	assert.Equal(t, 200, send(http.MethodGet, "/2/users/21", "Bearer a").code, "another endpoint")
	assert.Equal(t, 200, send(http.MethodGet, "/2/tweets/21", "Bearer b").code, "another token")
	clock.t = time.Unix(1_700_000_900, 0)
	assert.Equal(t, 200, send(http.MethodGet, "/2/tweets/21", "Bearer a").code, "at the reset")

	// 24 posts a day (12×2), 2 per 15 minutes.
	for i := range 24 {
		resp := send(http.MethodPost, "/2/tweets", "Bearer a")
		require.Equal(t, 200, resp.code, i)
		assert.Equal(t, "24", resp.header.Get("X-User-Limit-24hour-Limit"))
		assert.Equal(t, itoa(23-i), resp.header.Get("X-User-Limit-24hour-Remaining"))
		if i%2 == 1 {
			clock.Add(15 * time.Minute)
		}
	}
	day := send(http.MethodPost, "/2/tweets", "Bearer a")
	require.Equal(t, http.StatusTooManyRequests, day.code, "the day's posts spent")
	assert.Equal(t, "2", day.header.Get("X-Rate-Limit-Remaining"), "the 15 minutes had room")
	assert.Equal(t, "0", day.header.Get("X-User-Limit-24hour-Remaining"))
}
