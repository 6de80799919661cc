package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlack: N per rolling Window per token and method; a 429 with
// Retry-After only.
func TestSlack(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	u, err := NewSlack(Config{N: 2, Window: time.Minute, Now: clock.Now})
	require.NoError(t, err)
	post := func(method, token string) *httpResult {
		return result(call(u, http.MethodPost, "/api/"+method, "Authorization", token))
	}
	require.Equal(t, 200, post("chat.postMessage", "a").code)
	clock.Add(20 * time.Second)
	require.Equal(t, 200, post("chat.postMessage", "a").code)
	over := post("chat.postMessage", "a")
	require.Equal(t, http.StatusTooManyRequests, over.code)
	assert.Equal(t, "40", over.header.Get("Retry-After"))
	assert.Empty(t, over.header.Get("X-Ratelimit-Remaining"))
	assert.Equal(t, 200, post("conversations.list", "a").code, "another method")
	assert.Equal(t, 200, post("chat.postMessage", "b").code, "another workspace")
	clock.Add(40 * time.Second)
	assert.Equal(t, 200, post("chat.postMessage", "a").code)
	assert.Equal(t, 1, u.Stats().Keys["a chat.postMessage"].Rejected)
}
