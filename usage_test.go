package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// CredentialKey gives the key the KeyFunc gives a request with the token.
func TestCredentialKeyMatchesKeyFuncs(t *testing.T) {
	const tok = "s3cr3t-t0ken"
	for _, c := range []struct {
		by  string
		fn  throttle.KeyFunc
		set func(*http.Request)
	}{
		{"bearer", throttle.ByAuthorization(), func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }},
		{"bearer", throttle.ByBearerToken(), func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }},
		{"query:access_token", throttle.ByQuery("access_token"), func(r *http.Request) { r.URL.RawQuery = "access_token=" + tok }},
		{"header:x-api-key", throttle.ByHeader("X-Api-Key"), func(r *http.Request) { r.Header.Set("X-Api-Key", tok) }},
	} {
		r := httptest.NewRequest("GET", "https://api.example.com/x", nil)
		c.set(r)
		want, err := c.fn(r)
		require.NoError(t, err)
		got, err := throttle.CredentialKey(c.by, tok)
		require.NoError(t, err)
		assert.Equal(t, want, got, c.by)
		assert.NotContains(t, got, tok)
	}
	_, err := throttle.CredentialKey("cookie:x", tok)
	require.True(t, isA[*throttle.KeyError](err), "%v", err)
	assert.NotContains(t, err.Error(), tok)
	_, err = throttle.CredentialKey("bearer", " ")
	require.True(t, isA[*throttle.KeyError](err), "%v", err)
}

// Transport.Usage reads the key a request used: the same scope, HMAC and
// margin; StoreKey names it.
func TestTransportUsage(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	st, err := store.NewMemory()
	require.NoError(t, err)
	secret := []byte(strings.Repeat("k", throttle.MinKeySecretLen))
	rule := throttle.Rule{Name: "api", Host: "127.0.0.1", Limits: []throttle.Limit{throttle.PerMinute(5), throttle.PerHour(100)},
		Key: throttle.ByAuthorization(), FailFast: true, NoDefaultPace: true} // the windows alone: Usage reads them
	tr, err := throttle.New(nil, st, throttle.WithRule(rule), throttle.WithKeySecret(secret))
	require.NoError(t, err)
	client := &http.Client{Transport: tr}
	for range 3 {
		req, _ := http.NewRequest("GET", up.URL, nil)
		req.Header.Set("Authorization", "Bearer tok-1")
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	rk, err := throttle.CredentialKey("bearer", "tok-1")
	require.NoError(t, err)
	u, err := tr.Usage(context.Background(), "api", rk)
	require.NoError(t, err)
	require.Len(t, u.Limits, 2)
	assert.Equal(t, 3, u.Limits[0].Used+u.Limits[0].Reserved)
	assert.Equal(t, 3, u.Limits[1].Used+u.Limits[1].Reserved)
	assert.Equal(t, time.Minute+throttle.DefaultMargin, u.Limits[0].Limit.Per)

	sk, err := tr.StoreKey("api", rk)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(sk, "api:hmac:"), sk)
	assert.NotContains(t, sk, "tok-1")
	direct, err := st.Usage(context.Background(), sk, contract.Request{Limits: []contract.Limit{u.Limits[0].Limit, u.Limits[1].Limit}, Cost: 1})
	require.NoError(t, err)
	assert.Equal(t, 3, direct.Limits[0].Used+direct.Limits[0].Reserved)

	// Another token's key is empty; unknown rules are typed errors.
	other, _ := throttle.CredentialKey("bearer", "tok-2")
	u, err = tr.Usage(context.Background(), "api", other)
	require.NoError(t, err)
	assert.Zero(t, u.Limits[0].Used+u.Limits[0].Reserved)
	_, err = tr.Usage(context.Background(), "nope", rk)
	assert.True(t, errors.Is(err, throttle.ErrUnknownRule))
	_, err = tr.Usage(context.Background(), "api", "")
	assert.True(t, isA[*throttle.KeyError](err), "%v", err)
}

// TestTransportUsageDefaultPace: under the default shape (a SlidingLog rule
// paces its slowest limit), Usage after a run of requests says the next free
// slot that the next request then gets, set by the default pace.
func TestTransportUsageDefaultPace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
			Name: "api", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(100)}, Key: throttle.Fixed("k"),
		}))
		get := func() {
			req, err := http.NewRequest(http.MethodGet, "https://api.example.com/x", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
		}
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(get)
			synctest.Wait() // reserve in order
		}
		u, err := tr.Usage(context.Background(), "api", "k")
		require.NoError(t, err)
		asked := time.Now()
		require.Len(t, u.Limits, 2, "the window and the default pace")
		pace := u.Limits[1].Limit
		assert.True(t, pace.Paced)
		assert.Equal(t, pace.Burst+1, u.Limits[1].Used, "the burst is spent")
		assert.Equal(t, contract.CauseLimit, u.NextCause)
		assert.Equal(t, 1, u.NextLimit)
		assert.Positive(t, u.Next)

		wg.Go(get)
		wg.Wait()
		require.Equal(t, 13, sent.count())
		assert.Equal(t, u.Next, sent.times[12].Sub(asked), "the next request goes at Usage's next free slot")
	})
}
