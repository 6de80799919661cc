package throttletest

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMeta: the app's calls over a rolling Window, reported as a
// percentage in X-App-Usage, refused with 400 code 4 beyond it; an ad
// account's business use case counted apart, in X-Business-Use-Case-Usage.
func TestMeta(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	u, err := NewMeta(Config{N: 4, Window: time.Hour, Now: clock.Now})
	require.NoError(t, err)
	get := func(path string) *http.Response {
		return call(u, http.MethodGet, path).Result()
	}
	for i, want := range []string{"25", "50", "75", "100"} {
		resp := get("/v19.0/me?access_token=app")
		require.Equal(t, 200, resp.StatusCode, i)
		assert.Equal(t, `{"call_count":`+want+`,"total_cputime":`+want+`,"total_time":`+want+`}`, resp.Header.Get("X-App-Usage"))
		clock.Add(10 * time.Minute)
	}
	resp := get("/v19.0/me?access_token=app")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body(t, resp), `"code":4}`)
	clock.Add(20 * time.Minute)
	assert.Equal(t, 200, get("/v19.0/me?access_token=app").StatusCode, "an hour after the first call")

	// An ad account: its own count beside the app's.
	for i := range 4 {
		resp := get("/v19.0/act_42/insights?access_token=ads" + itoa(i%2))
		require.Equal(t, 200, resp.StatusCode, i)
	}
	clock.Add(15 * time.Minute)
	resp = get("/v19.0/act_42/insights?access_token=ads0")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body(t, resp), `"code":80004}`)
	assert.Equal(t, `{"call_count":50,"total_cputime":50,"total_time":50}`, resp.Header.Get("X-App-Usage"))
	assert.Equal(t, `{"42":[{"type":"ads_management","call_count":100,"total_cputime":100,"total_time":100,"estimated_time_to_regain_access":45}]}`,
		resp.Header.Get("X-Business-Use-Case-Usage"))
	assert.Equal(t, 200, get("/v19.0/act_7/insights?access_token=ads0").StatusCode, "another ad account")
	assert.Empty(t, get("/v19.0/me?access_token=ads0").Header.Get("X-Business-Use-Case-Usage"))
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
