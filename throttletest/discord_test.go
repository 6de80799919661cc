package throttletest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDiscord: each route's bucket counts N per Window from its first
// request, per major parameter; routes that differ in ids share a bucket
// id; the global limit caps a token's routes together at 50 per second.
func TestDiscord(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	u, err := NewDiscord(Config{N: 2, Window: 2 * time.Second, Now: clock.Now})
	require.NoError(t, err)
	post := func(path string) *http.Response {
		return call(u, http.MethodPost, path, "Authorization", "Bot t").Result()
	}
	first := post("/api/v10/channels/1/messages")
	require.Equal(t, 200, first.StatusCode)
	assert.Equal(t, "2", first.Header.Get("X-Ratelimit-Limit"))
	assert.Equal(t, "1", first.Header.Get("X-Ratelimit-Remaining"))
	assert.Equal(t, "2.000", first.Header.Get("X-Ratelimit-Reset-After"))
	assert.Equal(t, "1700000002.000", first.Header.Get("X-Ratelimit-Reset"))
	bucket := first.Header.Get("X-Ratelimit-Bucket")
	require.NotEmpty(t, bucket)

	clock.Add(500 * time.Millisecond)
	require.Equal(t, 200, post("/api/v10/channels/1/messages").StatusCode)
	clock.Add(250 * time.Millisecond)
	refused := post("/api/v10/channels/1/messages")
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode)
	assert.Equal(t, "1.250", refused.Header.Get("X-Ratelimit-Reset-After"))
	assert.Equal(t, "2", refused.Header.Get("Retry-After"))
	assert.Equal(t, "user", refused.Header.Get("X-Ratelimit-Scope"))
	assert.Empty(t, refused.Header.Get("X-Ratelimit-Global"))
	var body struct {
		RetryAfter float64 `json:"retry_after"`
		Global     bool    `json:"global"`
	}
	require.NoError(t, json.NewDecoder(refused.Body).Decode(&body))
	assert.Equal(t, 1.25, body.RetryAfter)
	assert.False(t, body.Global)

	other := post("/api/v10/channels/2/messages")
	assert.Equal(t, 200, other.StatusCode, "another channel: its own count")
	assert.Equal(t, bucket, other.Header.Get("X-Ratelimit-Bucket"), "the same bucket id")
	assert.NotEqual(t, bucket, post("/api/v10/guilds/1/members").Header.Get("X-Ratelimit-Bucket"))

	clock.Add(1250 * time.Millisecond)
	assert.Equal(t, 200, post("/api/v10/channels/1/messages").StatusCode, "the bucket reset")

	// The global limit: 50 in a second across routes.
	clock.Add(time.Minute)
	for i := range 50 {
		require.Equal(t, 200, post("/api/v10/channels/"+itoa(100+i)+"/messages").StatusCode, i)
	}
	clock.Add(400 * time.Millisecond)
	global := post("/api/v10/channels/7/messages")
	require.Equal(t, http.StatusTooManyRequests, global.StatusCode)
	assert.Equal(t, "true", global.Header.Get("X-Ratelimit-Global"))
	require.NoError(t, json.NewDecoder(global.Body).Decode(&body))
	assert.Equal(t, 0.6, body.RetryAfter)
	assert.True(t, body.Global)
	clock.Add(600 * time.Millisecond)
	assert.Equal(t, 200, post("/api/v10/channels/7/messages").StatusCode)
	assert.Equal(t, 200, call(u, http.MethodGet, "/api/v10/users/@me", "Authorization", "Bot u").Code, "another bot")
}

// TestDiscordBan: 10,000 invalid responses (401, 403, 429) from a client
// in 10 minutes ban it for an hour; fewer, or older ones, do not.
func TestDiscordBan(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	u, err := NewDiscord(Config{Now: clock.Now})
	require.NoError(t, err)
	bad := func() int { return call(u, http.MethodGet, "/api/v10/users/@me", "Authorization", "not a token").Code }
	for i := range 9_999 {
		require.Equal(t, http.StatusUnauthorized, bad(), i)
		if i == 0 {
			clock.Add(time.Minute)
		}
	}
	clock.Add(9 * time.Minute) // the first has left the 10 minutes
	require.Equal(t, http.StatusUnauthorized, bad(), "9,999 in the last 10 minutes")
	require.Equal(t, http.StatusUnauthorized, bad(), "the 10,000th")
	banned := call(u, http.MethodGet, "/api/v10/users/@me", "Authorization", "Bot good")
	require.Equal(t, http.StatusTooManyRequests, banned.Code, "a valid token from the banned client")
	assert.Equal(t, "error code: 1015\n", banned.Body.String())
	assert.Equal(t, "3600", banned.Header().Get("Retry-After"))
	assert.Equal(t, 1, u.Stats().Keys["banned"].Rejected)
	clock.Add(time.Hour)
	assert.Equal(t, 200, call(u, http.MethodGet, "/api/v10/users/@me", "Authorization", "Bot good").Code, "an hour later")
}
