package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// hashOf matches a hashed key: a prefix and 128 bits in hex.
var hashOf = regexp.MustCompile(`^[a-zA-Z0-9_:-]+:[0-9a-f]{32}$`)

// keyReq builds a request for a key function test.
func keyReq(t *testing.T, rawURL string, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return req
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	const tok = "tok-SECRET-key-1234"
	tests := []struct {
		name    string
		f       throttle.KeyFunc
		req     func(t *testing.T) *http.Request
		want    string // exact key; "" with wantErr
		hashed  string // the key is hashed with this prefix
		wantErr string
	}{
		// ByHost
		{name: "ByHost", f: throttle.ByHost(), req: reqTo("https://api.example.com/x"), want: "host:api.example.com"},
		{name: "ByHost drops the port", f: throttle.ByHost(), req: reqTo("https://api.example.com:8443/x"), want: "host:api.example.com"},
		{name: "ByHost lower-cases", f: throttle.ByHost(), req: reqTo("https://API.Example.COM/x"), want: "host:api.example.com"},
		{name: "ByHost IPv6", f: throttle.ByHost(), req: reqTo("http://[::1]:8080/x"), want: "host:::1"},
		{name: "ByHost prefers URL.Host", f: throttle.ByHost(), req: func(t *testing.T) *http.Request {
			r := keyReq(t, "https://api.example.com/x")
			r.Host = "virtual.example.com"
			return r
		}, want: "host:api.example.com"},
		{name: "ByHost falls back to Host", f: throttle.ByHost(), req: func(t *testing.T) *http.Request {
			r := keyReq(t, "https://api.example.com/x")
			r.URL.Host, r.Host = "", "Server.Example.com:443"
			return r
		}, want: "host:server.example.com"},
		{name: "ByHost without host", f: throttle.ByHost(), req: func(t *testing.T) *http.Request {
			r := keyReq(t, "https://api.example.com/x")
			r.URL.Host, r.Host = "", ""
			return r
		}, wantErr: "the request has no host"},

		// ByHeader
		{name: "ByHeader", f: throttle.ByHeader("X-Api-Key"), req: reqTo("https://a.example.com", "X-Api-Key", tok), hashed: "header:X-Api-Key:"},
		{name: "ByHeader canonical name", f: throttle.ByHeader("x-api-key"), req: reqTo("https://a.example.com", "X-API-KEY", tok), hashed: "header:X-Api-Key:"},
		{name: "ByHeader missing", f: throttle.ByHeader("X-Api-Key"), req: reqTo("https://a.example.com"), wantErr: "no X-Api-Key header"},
		{name: "ByHeader empty", f: throttle.ByHeader("X-Api-Key"), req: reqTo("https://a.example.com", "X-Api-Key", ""), wantErr: "no X-Api-Key header"},

		// ByBearerToken
		{name: "ByBearerToken", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com", "Authorization", "Bearer "+tok), hashed: "bearer:"},
		{name: "ByBearerToken lower-case scheme", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com", "Authorization", "bearer "+tok), hashed: "bearer:"},
		{name: "ByBearerToken upper-case scheme", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com", "Authorization", "BEARER "+tok), hashed: "bearer:"},
		{name: "ByBearerToken extra spaces", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com", "Authorization", "Bearer   "+tok+" "), hashed: "bearer:"},
		{name: "ByBearerToken missing", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com"), wantErr: noAuthorization},
		{name: "ByBearerToken basic", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com", "Authorization", "Basic "+tok), wantErr: notBearer},
		{name: "ByBearerToken token alone", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com", "Authorization", tok), wantErr: notBearer},
		{name: "ByBearerToken empty token", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com", "Authorization", "Bearer "), wantErr: notBearer},
		{name: "ByBearerToken scheme alone", f: throttle.ByBearerToken(), req: reqTo("https://a.example.com", "Authorization", "Bearer"), wantErr: notBearer},

		// ByAuthorization
		{name: "ByAuthorization Bearer", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", "Bearer "+tok), hashed: "bearer:"},
		{name: "ByAuthorization token (GitHub)", f: throttle.ByAuthorization(), req: reqTo("https://api.github.com", "Authorization", "token "+tok), hashed: "bearer:"},
		{name: "ByAuthorization Basic", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", "Basic dXNlcjp0b2stU0VDUkVULWtleS0xMjM0"), hashed: "bearer:"},
		{name: "ByAuthorization scheme case", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", "TOKEN "+tok), hashed: "bearer:"},
		{name: "ByAuthorization spaces and a tab", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", " Bearer\t  "+tok+" "), hashed: "bearer:"},
		{name: "ByAuthorization missing", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com"), wantErr: noAuthorization},
		{name: "ByAuthorization blank", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", "  "), wantErr: noAuthorization},
		{name: "ByAuthorization empty credential", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", "Bearer "), wantErr: "the Authorization header has an empty credential"},
		{name: "ByAuthorization one word", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", tok), wantErr: oneWord},
		{name: "ByAuthorization scheme alone", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", "Bearer"), wantErr: oneWord},
		{name: "ByAuthorization Digest", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", `Digest username="`+tok+`", response="6629fae4"`),
			wantErr: "the Authorization scheme Digest " + signs},
		{name: "ByAuthorization OAuth 1.0", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", `oauth oauth_token="`+tok+`", oauth_nonce="k"`),
			wantErr: "the Authorization scheme OAuth " + signs},
		{name: "ByAuthorization AWS SigV4", f: throttle.ByAuthorization(), req: reqTo("https://a.example.com", "Authorization", "AWS4-HMAC-SHA256 Credential="+tok+"/20261123/us-east-1/s3/aws4_request"),
			wantErr: "the Authorization scheme AWS4 (AWS Signature Version 4) " + signs},

		// ByQuery
		{name: "ByQuery", f: throttle.ByQuery("access_token"), req: reqTo("https://a.example.com/x?a=1&access_token=" + tok), hashed: "query:access_token:"},
		{name: "ByQuery missing", f: throttle.ByQuery("access_token"), req: reqTo("https://a.example.com/x?a=1"), wantErr: "no access_token query parameter"},
		{name: "ByQuery empty", f: throttle.ByQuery("access_token"), req: reqTo("https://a.example.com/x?access_token="), wantErr: "no access_token query parameter"},
		{name: "ByQuery bad escape", f: throttle.ByQuery("access_token"), req: reqTo("https://a.example.com/x?access_token=%zz"), wantErr: "no access_token query parameter"},

		// Fixed
		{name: "Fixed", f: throttle.Fixed("acme-pay"), req: reqTo("https://a.example.com"), want: "acme-pay"},
		{name: "Fixed empty", f: throttle.Fixed(""), req: reqTo("https://a.example.com"), wantErr: "Fixed was given an empty name"},

		// FirstOf
		{name: "FirstOf first", f: throttle.FirstOf(throttle.ByBearerToken(), throttle.ByHost()),
			req: reqTo("https://a.example.com", "Authorization", "Bearer "+tok), hashed: "bearer:"},
		{name: "FirstOf falls back", f: throttle.FirstOf(throttle.ByBearerToken(), throttle.ByHost()),
			req: reqTo("https://a.example.com"), want: "host:a.example.com"},
		{name: "FirstOf skips an empty key", f: throttle.FirstOf(emptyKey, throttle.Fixed("x")),
			req: reqTo("https://a.example.com"), want: "x"},
		{name: "FirstOf all fail", f: throttle.FirstOf(throttle.ByBearerToken(), throttle.ByHeader("X-Api-Key")),
			req: reqTo("https://a.example.com"), wantErr: noAuthorization + "; no X-Api-Key header"},
		{name: "FirstOf nothing", f: throttle.FirstOf(), req: reqTo("https://a.example.com"), wantErr: "no key function derived a key"},
		{name: "FirstOf only empty keys", f: throttle.FirstOf(emptyKey), req: reqTo("https://a.example.com"), wantErr: "no key function derived a key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req(t)
			snapshot := req.Clone(req.Context())
			key, err := tc.f(req)
			assert.Equal(t, snapshot, req, "a KeyFunc must not modify the request")
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Empty(t, key)
				assert.Equal(t, tc.wantErr, err.Error())
				assert.NotContains(t, err.Error(), tok)
				return
			}
			require.NoError(t, err)
			assert.NotContains(t, key, tok)
			again, err := tc.f(tc.req(t))
			require.NoError(t, err)
			assert.Equal(t, key, again, "keys are stable")
			if tc.hashed == "" {
				assert.Equal(t, tc.want, key)
				return
			}
			assert.True(t, strings.HasPrefix(key, tc.hashed), key)
			assert.Regexp(t, hashOf, key)
			assert.Len(t, key, len(tc.hashed)+32)
		})
	}
}

// The reasons of the Authorization key functions.
const (
	noAuthorization = "no Authorization header (a transport that adds it, such as oauth2.Transport, must wrap the throttle's Transport, not be its base)"
	notBearer       = "the Authorization header is not a bearer token (ByAuthorization keys any scheme)"
	oneWord         = `the Authorization header is one word, not a scheme and a credential (for a key sent with no scheme, use ByHeader("Authorization"))`
	signs           = "signs every request, so its credential cannot key a log: key such requests by their stable part with a KeyFunc of your own"
)

// emptyKey is a KeyFunc that derives an empty key without an error.
func emptyKey(*http.Request) (string, error) { return "", nil }

// reqTo returns a request builder for a table row.
func reqTo(rawURL string, header ...string) func(t *testing.T) *http.Request {
	return func(t *testing.T) *http.Request { return keyReq(t, rawURL, header...) }
}

// TestHashedKeysTellTokensApart checks that hashed keys differ per token, per
// parameter and per key function, and agree for the same token.
func TestHashedKeysTellTokensApart(t *testing.T) {
	t.Parallel()
	key := func(f throttle.KeyFunc, r *http.Request) string {
		k, err := f(r)
		require.NoError(t, err)
		return k
	}
	a := key(throttle.ByBearerToken(), keyReq(t, "https://a.example.com", "Authorization", "Bearer token-a"))
	b := key(throttle.ByBearerToken(), keyReq(t, "https://a.example.com", "Authorization", "Bearer token-b"))
	a2 := key(throttle.ByBearerToken(), keyReq(t, "https://other.example.com", "Authorization", "bearer token-a"))
	q := key(throttle.ByQuery("t"), keyReq(t, "https://a.example.com/?t=token-a"))
	q2 := key(throttle.ByQuery("u"), keyReq(t, "https://a.example.com/?u=token-a"))
	h := key(throttle.ByHeader("X-A"), keyReq(t, "https://a.example.com", "X-A", "token-a"))
	h2 := key(throttle.ByHeader("X-B"), keyReq(t, "https://a.example.com", "X-B", "token-a"))
	assert.Equal(t, a, a2)
	assert.NotEqual(t, a, b)
	keys := map[string]bool{a: true, b: true, q: true, q2: true, h: true, h2: true}
	assert.Len(t, keys, 6)
	// The hash is part of the stored key format: pin it, so that a change is
	// noticed (it would split every fleet's logs during a rolling deploy).
	assert.Equal(t, "bearer:ba7816bf8f01cfea414140de5dae2223", key(throttle.ByBearerToken(),
		keyReq(t, "https://a.example.com", "Authorization", "Bearer abc")))

	// ByAuthorization: the scheme is not part of the key, so that GitHub's
	// "token X" and "Bearer X", which it counts as one token, share a log;
	// and a bearer token's key is ByBearerToken's, so that a fleet may switch
	// from one to the other while it runs.
	auth := throttle.ByAuthorization()
	for _, v := range []string{"Bearer abc", "token abc", "TOKEN abc", "Basic abc", "bearer\tabc "} {
		assert.Equal(t, "bearer:ba7816bf8f01cfea414140de5dae2223", key(auth, keyReq(t, "https://a.example.com", "Authorization", v)), v)
	}
	assert.NotEqual(t, key(auth, keyReq(t, "https://a.example.com", "Authorization", "token abc")),
		key(auth, keyReq(t, "https://a.example.com", "Authorization", "token abd")))
}

// TestKeysAreBounded checks that long, huge and non-UTF-8 values give keys of
// bounded length or a clean KeyError, and never a panic.
func TestKeysAreBounded(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("é\xff", 1<<19) // 1.5 MiB, not valid UTF-8
	tests := []struct {
		name    string
		key     throttle.KeyFunc
		header  []string
		url     string
		want    string // exact key, or
		prefix  string // a hashed key with this prefix
		wantErr bool   // a *KeyError
	}{
		{name: "MaxKeyLen kept", key: throttle.Fixed(strings.Repeat("k", throttle.MaxKeyLen)), want: strings.Repeat("k", throttle.MaxKeyLen)},
		{name: "MaxKeyLen+1 hashed", key: throttle.Fixed(strings.Repeat("k", throttle.MaxKeyLen+1)), prefix: "sha256:"},
		{name: "huge Fixed hashed", key: throttle.Fixed(huge), prefix: "sha256:"},
		{name: "short non-UTF-8 Fixed kept", key: throttle.Fixed("gw-\xff\xfe"), want: "gw-\xff\xfe"},
		{name: "huge header", key: throttle.ByHeader("X-Api-Key"), header: []string{"X-Api-Key", huge}, prefix: "header:X-Api-Key:"},
		{name: "huge bearer token", key: throttle.ByBearerToken(), header: []string{"Authorization", "Bearer " + huge}, prefix: "bearer:"},
		{name: "huge token credential", key: throttle.ByAuthorization(), header: []string{"Authorization", "token " + huge}, prefix: "bearer:"},
		{name: "non-UTF-8 query", key: throttle.ByQuery("t"), url: "https://api.example.com/?t=%ff%fe%00", prefix: "query:t:"},
		{name: "huge custom key", key: func(*http.Request) (string, error) { return huge, nil }, prefix: "sha256:"},
		{name: "empty custom key", key: emptyKey, wantErr: true},
		{name: "custom error", key: func(*http.Request) (string, error) { return "", errors.New("no tenant") }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var decisions decisionLog
			var sent sendLog
			tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
				Name: "r", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(10)}, Key: tc.key,
			}))
			rawURL := tc.url
			if rawURL == "" {
				rawURL = "https://api.example.com/x"
			}
			req := keyReq(t, rawURL, tc.header...)
			require.NotPanics(t, func() { _, _ = tr.RoundTrip(req) })
			d := decisions.last(t)
			if tc.wantErr {
				var ke *throttle.KeyError
				require.ErrorAs(t, d.Err, &ke)
				assert.Equal(t, "r", ke.Rule)
				assert.Zero(t, sent.count())
				return
			}
			assert.Equal(t, throttle.Sent, d.Outcome)
			assert.LessOrEqual(t, len(d.Key), throttle.MaxKeyLen)
			if tc.prefix == "" {
				assert.Equal(t, tc.want, d.Key)
				return
			}
			assert.True(t, strings.HasPrefix(d.Key, tc.prefix), d.Key)
			assert.Len(t, d.Key, len(tc.prefix)+32)
		})
	}
}

// TestLongKeysShareALog checks that two requests with the same long key are
// counted in one log, and different long keys in different ones.
func TestLongKeysShareALog(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("tenant-", 100)
	var sent sendLog
	tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
		Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)}, FailFast: true,
		Key: func(r *http.Request) (string, error) { return long + r.Header.Get("X-Tenant"), nil },
	}))
	do := func(tenant string) error {
		_, err := tr.RoundTrip(keyReq(t, "https://api.example.com/x", "X-Tenant", tenant))
		return err
	}
	require.NoError(t, do("a"))
	assert.ErrorIs(t, do("a"), throttle.ErrLimited)
	assert.NoError(t, do("b"))
	assert.Equal(t, 2, sent.count())
}

// TestFirstOfNil: a nil KeyFunc inside FirstOf refuses requests with a
// KeyError saying so, rather than panicking at request time.
func TestFirstOfNil(t *testing.T) {
	t.Parallel()
	var decisions decisionLog
	var sent sendLog
	tr := newTransport(t, sent.base(), nil, decisions.option(), throttle.WithRule(throttle.Rule{
		Name: "r", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(10)},
		Key: throttle.FirstOf(throttle.ByBearerToken(), nil),
	}))
	var err error
	require.NotPanics(t, func() { _, err = tr.RoundTrip(keyReq(t, "https://api.example.com/x")) })
	require.True(t, isA[*throttle.KeyError](err), "%v", err)
	assert.EqualError(t, err, `throttle: no rate key: rule "r": FirstOf: key function 2 of 2 is nil`)
	assert.Zero(t, sent.count())
}
