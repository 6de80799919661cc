package throttletest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAlso: a request passes the token's limit and the app's, is counted in
// both or in neither, and a refusal is listed where it happened.
func TestAlso(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	up, err := NewUpstream(Config{N: 2, Window: time.Second, Key: byHeader, Now: clock.Now,
		Also: []Config{{N: 3, Window: time.Second, Key: func(*http.Request) string { return "app" }}}})
	require.NoError(t, err)
	send := func(key string) int {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Key", key)
		rec := httptest.NewRecorder()
		up.ServeHTTP(rec, req)
		return rec.Code
	}
	assert.Equal(t, []int{200, 200, 429, 200, 429}, []int{send("a"), send("a"), send("a"), send("b"), send("b")})
	st, app := up.Stats(), up.Also(0).Stats()
	assert.Equal(t, 2, st.Keys["a"].Accepted)
	assert.Equal(t, 1, st.Keys["a"].Rejected, "the token's own limit")
	assert.Equal(t, 1, st.Keys["b"].Rejected, "refused by the app")
	assert.Equal(t, 3, app.Keys["app"].Accepted)
	assert.Equal(t, 1, app.Keys["app"].Rejected, "only the refusal the app made")
	clock.Add(time.Second)
	assert.Equal(t, 200, send("b"), "b's refusal counted nowhere")
	assert.Equal(t, 200, send("b"))
	assert.Equal(t, 429, send("b"))

	_, err = NewUpstream(Config{N: 1, Window: time.Second, Algorithm: GCRA, Also: []Config{{N: 1, Window: time.Second}}})
	assert.Error(t, err)
	_, err = NewUpstream(Config{N: 1, Window: time.Second, Also: []Config{{N: 1, Window: time.Second, IETF: true}}})
	assert.Error(t, err)
	_, err = NewUpstream(Config{N: 1, Window: time.Second, Also: []Config{{N: 0, Window: time.Second}}})
	assert.Error(t, err)
}
