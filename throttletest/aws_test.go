package throttletest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAWS: a token bucket per access key, Region and action; the action
// from X-Amz-Target, the query or a form body; refusals are 400s with an
// error code, JSON or XML by protocol.
func TestAWS(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	u, err := NewAWS(Config{N: 2, Window: time.Second, Now: clock.Now}) // a bucket of 2, refilled 2 a second
	require.NoError(t, err)
	auth := func(key, region string) string {
		return "AWS4-HMAC-SHA256 Credential=" + key + "/20261126/" + region + "/ec2/aws4_request, SignedHeaders=host, Signature=ab"
	}
	form := func(action, key, region string) *httpResult {
		req := httptest.NewRequest(http.MethodPost, "https://ec2."+region+".amazonaws.com/", strings.NewReader("Action="+action+"&Version=2016-11-15"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
		req.Header.Set("Authorization", auth(key, region))
		rec := httptest.NewRecorder()
		u.ServeHTTP(rec, req)
		return result(rec)
	}
	require.Equal(t, 200, form("DescribeHosts", "AKID", "us-east-1").code)
	require.Equal(t, 200, call(u, http.MethodGet, "https://ec2.us-east-1.amazonaws.com/?Action=DescribeHosts", "Authorization", auth("AKID", "us-east-1")).Code,
		"the same action in the query")
	over := form("DescribeHosts", "AKID", "us-east-1")
	require.Equal(t, http.StatusBadRequest, over.code)
	assert.Contains(t, over.body, "<Code>RequestLimitExceeded</Code>")
	assert.Equal(t, 200, form("RunInstances", "AKID", "us-east-1").code, "another action")
	assert.Equal(t, 200, form("DescribeHosts", "AKID", "eu-west-1").code, "another Region")
	assert.Equal(t, 200, form("DescribeHosts", "AKID2", "us-east-1").code, "another account")
	clock.Add(500 * time.Millisecond)
	assert.Equal(t, 200, form("DescribeHosts", "AKID", "us-east-1").code, "one token back after 500ms")
	assert.Equal(t, 1, u.Stats().Keys["AKID us-east-1 DescribeHosts"].Rejected)

	target := func() *httpResult {
		return result(call(u, http.MethodPost, "https://dynamodb.us-east-1.amazonaws.com/", "Authorization", auth("AKID", "us-east-1"),
			"X-Amz-Target", "DynamoDB_20120810.Query"))
	}
	require.Equal(t, 200, target().code)
	require.Equal(t, 200, target().code)
	json := target()
	require.Equal(t, http.StatusBadRequest, json.code)
	assert.Equal(t, "ThrottlingException", json.header.Get("X-Amzn-Errortype"))
	assert.Contains(t, json.body, "#ThrottlingException")
}
