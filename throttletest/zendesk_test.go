package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestZendesk: the account's N per aligned Window, X-Rate-Limit and
// ratelimit-* on ticketing endpoints, ticket updates limited apart, 429
// with Retry-After.
func TestZendesk(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_020, 0)} // 40s into a minute
	u, err := NewZendesk(Config{N: 14, Window: time.Minute, Now: clock.Now})
	require.NoError(t, err)
	send := func(method, path string) *httpResult {
		return result(call(u, method, "https://acme.zendesk.com"+path))
	}
	list := send(http.MethodGet, "/api/v2/tickets.json")
	require.Equal(t, 200, list.code)
	assert.Equal(t, "14", list.header.Get("X-Rate-Limit"))
	assert.Equal(t, "13", list.header.Get("X-Rate-Limit-Remaining"))
	assert.Equal(t, "13", list.header.Get("Ratelimit-Remaining"))
	assert.Equal(t, "20", list.header.Get("Ratelimit-Reset"))
	assert.Empty(t, send(http.MethodGet, "/api/v2/users.json").header.Get("Ratelimit-Remaining"), "not a ticketing endpoint")

	// Ticket updates: 14×100/700 = 2 a minute.
	for range 2 {
		resp := send(http.MethodPut, "/api/v2/tickets/7.json")
		require.Equal(t, 200, resp.code)
	}
	upd := send(http.MethodPut, "/api/v2/tickets/8.json")
	require.Equal(t, http.StatusTooManyRequests, upd.code)
	assert.Equal(t, "total=2; remaining=0; resets=20", upd.header.Get("Zendesk-Ratelimit-Tickets-Update"))
	assert.Equal(t, "20", upd.header.Get("Retry-After"))
	for range 10 {
		require.Equal(t, 200, send(http.MethodGet, "/api/v2/users.json").code)
	}
	over := send(http.MethodGet, "/api/v2/users.json")
	require.Equal(t, http.StatusTooManyRequests, over.code, "the account's 14")
	assert.Equal(t, "0", over.header.Get("X-Rate-Limit-Remaining"))
	assert.Equal(t, 200, result(call(u, http.MethodGet, "https://other.zendesk.com/api/v2/users.json")).code, "another account")
	clock.Add(20 * time.Second)
	assert.Equal(t, 200, send(http.MethodPut, "/api/v2/tickets/8.json").code, "a new minute")
}
