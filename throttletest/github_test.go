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

// TestGitHubPrimary: the hourly window opens at the token's first request,
// closes at the whole second its reset announces, refuses with 403 and
// remaining 0 when full; each resource and each token counts apart.
func TestGitHubPrimary(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 300_000_000)}
	u, err := NewGitHub(Config{N: 3, Window: 10 * time.Second, Now: clock.Now})
	require.NoError(t, err)
	get := func(path, token string) *http.Response {
		return call(u, http.MethodGet, path, "Authorization", token).Result()
	}
	for i := range 3 {
		resp := get("/repos/a/b", "t1")
		require.Equal(t, 200, resp.StatusCode, i)
		assert.Equal(t, "1700000010", resp.Header.Get("X-Ratelimit-Reset"), "the first request + 10s, rounded down")
		assert.Equal(t, "core", resp.Header.Get("X-Ratelimit-Resource"))
		assert.Equal(t, [2]int{i + 1, 2 - i}, [2]int{atoi(t, resp.Header.Get("X-Ratelimit-Used")), atoi(t, resp.Header.Get("X-Ratelimit-Remaining"))})
		clock.Add(time.Second)
	}
	resp := get("/repos/a/b", "t1")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Equal(t, "0", resp.Header.Get("X-Ratelimit-Remaining"))
	assert.Equal(t, "3", resp.Header.Get("X-Ratelimit-Used"))
	assert.Empty(t, resp.Header.Get("Retry-After"))
	assert.Equal(t, 200, get("/repos/a/b", "t2").StatusCode, "another token")
	search := get("/search/code?q=x", "t1")
	assert.Equal(t, 200, search.StatusCode, "another resource")
	assert.Equal(t, "search", search.Header.Get("X-Ratelimit-Resource"))
	assert.Equal(t, "2", search.Header.Get("X-Ratelimit-Remaining"))

	clock.t = time.Unix(1_700_000_009, 999_999_999)
	assert.Equal(t, http.StatusForbidden, get("/repos/a/b", "t1").StatusCode, "1ns before the reset")
	clock.Add(time.Nanosecond)
	resp = get("/repos/a/b", "t1")
	assert.Equal(t, 200, resp.StatusCode, "at the reset")
	assert.Equal(t, "2", resp.Header.Get("X-Ratelimit-Remaining"))
	assert.Equal(t, "1700000020", resp.Header.Get("X-Ratelimit-Reset"), "10s after the first request of the window")
	st := u.Stats()
	assert.Equal(t, 5, st.Keys["t1"].Accepted)
	assert.Equal(t, 2, st.Keys["t1"].Rejected)
}

// TestGitHubPoints: the secondary limit charges a GET 1 point and a POST 5
// in a sliding Window/60, and refuses with 403 and retry-after.
func TestGitHubPoints(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	// 1,000 an hour: 180 points a minute.
	u, err := NewGitHub(Config{N: 1000, Window: time.Hour, Now: clock.Now})
	require.NoError(t, err)
	send := func(method string) *http.Response {
		return call(u, method, "/repos/a/b/issues", "Authorization", "t").Result()
	}
	for range 35 {
		require.Equal(t, 200, send(http.MethodPost).StatusCode) // 175 points
	}
	clock.Add(10 * time.Second)
	for range 5 {
		require.Equal(t, 200, send(http.MethodGet).StatusCode, "a GET costs 1")
	}
	resp := send(http.MethodGet)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "180 points spent")
	assert.Equal(t, "50", resp.Header.Get("Retry-After"), "until the first POSTs leave the minute")
	assert.Equal(t, "960", resp.Header.Get("X-Ratelimit-Remaining"), "the primary limit is not what refused")
	require.Equal(t, http.StatusForbidden, send(http.MethodPost).StatusCode)
	clock.Add(50 * time.Second)
	assert.Equal(t, 200, send(http.MethodPost).StatusCode, "a minute after the first POSTs")
}

// TestGitHubInFlight: a request arriving while MaxInFlight of its token are
// being answered is refused with 403 and retry-after.
func TestGitHubInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, err := NewGitHub(Config{MaxInFlight: 2, ServiceTime: time.Second})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { assert.Equal(t, 200, call(u, http.MethodGet, "/user", "Authorization", "t").Code) })
		}
		synctest.Wait()
		rec := call(u, http.MethodGet, "/user", "Authorization", "t")
		assert.Equal(t, http.StatusForbidden, rec.Code)
		assert.Equal(t, "60", rec.Header().Get("Retry-After"))
		assert.Equal(t, 200, call(u, http.MethodGet, "/user", "Authorization", "other").Code, "another token")
		wg.Wait()
		assert.Equal(t, 200, call(u, http.MethodGet, "/user", "Authorization", "t").Code)
	})
}
