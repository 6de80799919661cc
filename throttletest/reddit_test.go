package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReddit: N per aligned Window, X-Ratelimit-Used/-Remaining (with a
// fraction)/-Reset (seconds), 429 beyond; an action sooner than Window/60
// after the last is a 200 with RATELIMIT in its body.
func TestReddit(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_200, 0)} // 400s into a 600s window
	u, err := NewReddit(Config{N: 3, Window: 10 * time.Minute, Now: clock.Now})
	require.NoError(t, err)
	send := func(method, path string) *httpResult {
		return result(call(u, method, path, "Authorization", "bearer t"))
	}
	first := send(http.MethodPost, "/api/comment")
	require.Equal(t, 200, first.code)
	assert.NotContains(t, first.body, "RATELIMIT")
	assert.Equal(t, "1", first.header.Get("X-Ratelimit-Used"))
	assert.Equal(t, "2.0", first.header.Get("X-Ratelimit-Remaining"))
	assert.Equal(t, "200", first.header.Get("X-Ratelimit-Reset"))
	clock.Add(5 * time.Second)
	action := send(http.MethodPost, "/api/comment")
	require.Equal(t, 200, action.code)
	assert.Contains(t, action.body, `"RATELIMIT"`, "an action 5s after the last")
	assert.Equal(t, "1.0", action.header.Get("X-Ratelimit-Remaining"), "counted as a query")
	require.Equal(t, 200, send(http.MethodGet, "/r/golang/hot").code)
	over := send(http.MethodGet, "/r/golang/hot")
	require.Equal(t, http.StatusTooManyRequests, over.code)
	assert.Equal(t, "0.0", over.header.Get("X-Ratelimit-Remaining"))
	clock.Add(195 * time.Second)
	assert.Equal(t, 200, send(http.MethodGet, "/r/golang/hot").code, "a new window at the 10 minutes")
	assert.Equal(t, 2, u.Stats().Keys["bearer t"].Rejected, "the RATELIMIT and the 429")
}
