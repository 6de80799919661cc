package profiles_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/profiles"
)

// The keys of X and AWS: what tells two requests' limits apart, and what
// must not (a signature that changes on every request).
func TestProfileKeys(t *testing.T) {
	t.Parallel()
	req := func(method, url, body string, hdr ...string) *http.Request {
		var r *http.Request
		var err error
		if body == "" {
			r, err = http.NewRequest(method, url, nil)
		} else {
			r, err = http.NewRequest(method, url, strings.NewReader(body))
		}
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return r
	}
	key := func(r *http.Request, k func(*http.Request) (string, error)) string {
		v, err := k(r)
		require.NoError(t, err)
		return v
	}

	x := profiles.X(900, 0).Key
	oauth := func(sig string) string {
		return `OAuth oauth_consumer_key="app", oauth_token="123-user", oauth_signature="` + sig + `", oauth_nonce="` + sig + `"`
	}
	a := key(req("GET", "https://api.x.com/2/tweets/1460323737035677698", "", "Authorization", oauth("s1")), x)
	assert.Equal(t, a, key(req("GET", "https://api.x.com/2/tweets/20", "", "Authorization", oauth("s2")), x),
		"OAuth 1.0a: another signature and id, the same user and endpoint")
	assert.NotEqual(t, a, key(req("GET", "https://api.x.com/2/users/20", "", "Authorization", oauth("s1")), x), "another endpoint")
	assert.NotEqual(t, a, key(req("POST", "https://api.x.com/2/tweets/20", "", "Authorization", oauth("s1")), x), "another method")
	assert.NotContains(t, a, "123-user", "the token is hashed")
	assert.NotEqual(t, a, key(req("GET", "https://api.x.com/2/tweets/1", "", "Authorization", "Bearer app"), x), "the app's token")

	aws := profiles.AWS(100, 20).Key
	sig := func(keyID, region, service, s string) string {
		return "AWS4-HMAC-SHA256 Credential=" + keyID + "/20261126/" + region + "/" + service + "/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + s
	}
	const form = "application/x-www-form-urlencoded; charset=utf-8"
	hosts := key(req("POST", "https://ec2.us-east-1.amazonaws.com/", "Action=DescribeHosts&Version=2016-11-15",
		"Authorization", sig("AKID", "us-east-1", "ec2", "aa"), "Content-Type", form), aws)
	assert.Equal(t, hosts, key(req("GET", "https://ec2.us-east-1.amazonaws.com/?Action=DescribeHosts&Version=2016-11-15", "",
		"Authorization", sig("AKID", "us-east-1", "ec2", "bb")), aws), "the action in the query or in a form body, any signature")
	assert.NotEqual(t, hosts, key(req("POST", "https://ec2.us-east-1.amazonaws.com/", "Action=RunInstances",
		"Authorization", sig("AKID", "us-east-1", "ec2", "aa"), "Content-Type", form), aws), "another action")
	assert.NotEqual(t, hosts, key(req("POST", "https://ec2.eu-west-1.amazonaws.com/", "Action=DescribeHosts",
		"Authorization", sig("AKID", "eu-west-1", "ec2", "aa"), "Content-Type", form), aws), "another Region")
	assert.NotEqual(t, hosts, key(req("POST", "https://ec2.us-east-1.amazonaws.com/", "Action=DescribeHosts",
		"Authorization", sig("AKID2", "us-east-1", "ec2", "aa"), "Content-Type", form), aws), "another account's key")
	assert.NotContains(t, hosts, "AKID")
	ddb := key(req("POST", "https://dynamodb.us-east-1.amazonaws.com/", `{"TableName":"t"}`,
		"Authorization", sig("AKID", "us-east-1", "dynamodb", "aa"), "X-Amz-Target", "DynamoDB_20120810.Query"), aws)
	assert.True(t, strings.HasSuffix(ddb, ":us-east-1:dynamodb:DynamoDB_20120810.Query"), ddb)
	_, err := aws(req("GET", "https://ec2.us-east-1.amazonaws.com/?Action=DescribeHosts", ""))
	assert.ErrorContains(t, err, "Signature Version 4")
}
