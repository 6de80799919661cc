package throttletest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// call serves one request to u and returns its answer; header holds name,
// value pairs.
func call(u *Upstream, method, target string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	u.ServeHTTP(rec, req)
	return rec
}

// TestAPIConfig: an API's fake takes N and Window together or neither, and
// refuses what its API decides itself.
func TestAPIConfig(t *testing.T) {
	t.Parallel()
	ctors := map[string]func(Config) (*Upstream, error){
		"github": NewGitHub, "discord": NewDiscord, "meta": NewMeta,
		"google": NewGoogleMaps, "stripe": NewStripe, "shopify": NewShopify,
	}
	for name, ctor := range ctors {
		_, err := ctor(Config{})
		require.NoError(t, err, name)
		for i, bad := range []Config{
			{N: 5},
			{Window: time.Second},
			{N: 5, Window: time.Second, Algorithm: GCRA},
			{N: 5, Window: time.Second, XRateLimit: true},
			{N: 5, Window: time.Second, Also: []Config{{N: 1, Window: time.Second}}},
		} {
			_, err := ctor(bad)
			require.Error(t, err, "%s: %d", name, i)
		}
		if name != "github" {
			_, err := ctor(Config{MaxInFlight: 3})
			require.Error(t, err, name)
		}
	}
}

// httpResult is a recorded answer, read once.
type httpResult struct {
	code   int
	header http.Header
	body   string
}

func result(rec *httptest.ResponseRecorder) *httpResult {
	return &httpResult{rec.Code, rec.Header(), rec.Body.String()}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

func itoa(n int) string { return strconv.Itoa(n) }
