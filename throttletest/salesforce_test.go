package throttletest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSalesforce: an org's allocation per rolling Window, reported in
// Sforce-Limit-Info, refused with 403 REQUEST_LIMIT_EXCEEDED; each org
// (host) counts apart.
func TestSalesforce(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	u, err := NewSalesforce(Config{N: 2, Window: time.Hour, Now: clock.Now})
	require.NoError(t, err)
	get := func(host string) *httpResult {
		return result(call(u, http.MethodGet, "https://"+host+"/services/data/v62.0/query?q=x"))
	}
	first := get("acme.my.salesforce.com")
	require.Equal(t, 200, first.code)
	assert.Equal(t, "api-usage=1/2", first.header.Get("Sforce-Limit-Info"))
	clock.Add(30 * time.Minute)
	require.Equal(t, 200, get("acme.my.salesforce.com").code)
	over := get("acme.my.salesforce.com:443")
	require.Equal(t, http.StatusForbidden, over.code, "the same org on another port")
	assert.Contains(t, over.body, `"errorCode":"REQUEST_LIMIT_EXCEEDED"`)
	assert.Equal(t, "api-usage=2/2", over.header.Get("Sforce-Limit-Info"))
	assert.Equal(t, 200, get("other.my.salesforce.com").code, "another org")
	clock.Add(30 * time.Minute)
	assert.Equal(t, 200, get("acme.my.salesforce.com").code, "the first request left the rolling window")
}
