package operator_test

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
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

// isA reports whether err, or an error it wraps, is a T.
func isA[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

// sends is a fake upstream that answers 200 and records when it was called.
type sends struct {
	mu    sync.Mutex
	times []time.Time
}

func (s *sends) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, time.Now())
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// defaultMargin is a throttle.Rule's Margin when it sets none.
const defaultMargin = 5 * time.Millisecond

// secret is long enough for WithKeySecret.
var secret = []byte(strings.Repeat("k", 16))

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
		got, err := operator.CredentialKey(c.by, tok)
		require.NoError(t, err)
		assert.Equal(t, want, got, c.by)
		assert.NotContains(t, got, tok)
	}
	_, err := operator.CredentialKey("cookie:x", tok)
	require.True(t, isA[*throttle.KeyError](err), "%v", err)
	assert.NotContains(t, err.Error(), tok)
	_, err = operator.CredentialKey("bearer", " ")
	require.True(t, isA[*throttle.KeyError](err), "%v", err)
}

// Usage reads the key a request used: the same scope, HMAC and margin;
// StoreKey names it.
func TestUsage(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	st, err := store.NewMemory()
	require.NoError(t, err)
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
	rk, err := operator.CredentialKey("bearer", "tok-1")
	require.NoError(t, err)
	u, err := operator.Usage(context.Background(), tr, "api", rk)
	require.NoError(t, err)
	require.Len(t, u.Limits, 2)
	assert.Equal(t, 3, u.Limits[0].Used+u.Limits[0].Reserved)
	assert.Equal(t, 3, u.Limits[1].Used+u.Limits[1].Reserved)
	assert.Equal(t, time.Minute+defaultMargin, u.Limits[0].Limit.Per)

	sk, err := operator.StoreKey(tr, "api", rk)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(sk, "api:hmac:"), sk)
	assert.NotContains(t, sk, "tok-1")
	direct, err := st.Usage(context.Background(), sk, contract.Request{Limits: []contract.Limit{contract.Limit(u.Limits[0].Limit), contract.Limit(u.Limits[1].Limit)}, Cost: 1})
	require.NoError(t, err)
	assert.Equal(t, 3, direct.Limits[0].Used+direct.Limits[0].Reserved)

	// Another token's key is empty; unknown rules are typed errors.
	other, _ := operator.CredentialKey("bearer", "tok-2")
	u, err = operator.Usage(context.Background(), tr, "api", other)
	require.NoError(t, err)
	assert.Zero(t, u.Limits[0].Used+u.Limits[0].Reserved)
	_, err = operator.Usage(context.Background(), tr, "nope", rk)
	assert.True(t, errors.Is(err, operator.ErrUnknownRule))
	_, err = operator.Usage(context.Background(), tr, "api", "")
	assert.True(t, isA[*throttle.KeyError](err), "%v", err)
}

// TestUsageDefaultPace: under the default shape (a SlidingLog rule
// paces its slowest limit), Usage after a run of requests says the next free
// slot that the next request then gets, set by the default pace.
func TestUsageDefaultPace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sent sends
		st, err := store.NewMemory()
		require.NoError(t, err)
		tr, err := throttle.New(&sent, st, throttle.WithRule(throttle.Rule{
			Name: "api", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(100)}, Key: throttle.Fixed("k"),
		}))
		require.NoError(t, err)
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
		u, err := operator.Usage(context.Background(), tr, "api", "k")
		require.NoError(t, err)
		asked := time.Now()
		require.Len(t, u.Limits, 2, "the window and the default pace")
		pace := u.Limits[1].Limit
		assert.True(t, pace.Paced)
		assert.Equal(t, pace.Burst+1, u.Limits[1].Used, "the burst is spent")
		assert.Equal(t, operator.CauseLimit, u.NextCause)
		assert.Equal(t, 1, u.NextLimit)
		assert.Positive(t, u.Next)

		wg.Go(get)
		wg.Wait()
		require.Len(t, sent.times, 13)
		assert.Equal(t, u.Next, sent.times[12].Sub(asked), "the next request goes at Usage's next free slot")
	})
}

// TestStoreKeyErrors: a nil or zero Transport, an unknown rule, an empty
// key, and a rule whose keys start with a request's hash tag are errors,
// never a panic; none holds the key's secret.
func TestStoreKeyErrors(t *testing.T) {
	t.Parallel()
	st, err := store.NewMemory()
	require.NoError(t, err)
	tr, err := throttle.New(nil, st,
		throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(1)}}),
		throttle.WithRule(throttle.Rule{Name: "tagged", Host: "b.example.com", Limits: []throttle.Limit{throttle.PerSecond(1)},
			Also: []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("app"), Limits: []throttle.Limit{throttle.PerHour(100)}, HashTag: true}}}))
	require.NoError(t, err)

	for _, bad := range []*throttle.Transport{nil, {}} {
		_, err := operator.StoreKey(bad, "api", "k")
		require.ErrorContains(t, err, "nil or zero Transport")
		_, err = operator.Usage(context.Background(), bad, "api", "k")
		require.ErrorContains(t, err, "nil or zero Transport")
	}
	_, err = operator.StoreKey(tr, "nope", "k")
	require.ErrorIs(t, err, operator.ErrUnknownRule)
	assert.Contains(t, err.Error(), `"nope"`)
	_, err = operator.StoreKey(tr, "api", "")
	assert.True(t, isA[*throttle.KeyError](err), "%v", err)
	_, err = operator.StoreKey(tr, "tagged", "k")
	var ke *throttle.KeyError
	require.ErrorAs(t, err, &ke)
	assert.Equal(t, "tagged", ke.Rule)
	assert.Contains(t, ke.Reason, "hash tag of its Also key app")
	_, err = operator.Usage(context.Background(), tr, "tagged", "k")
	require.ErrorAs(t, err, &ke)

	sk, err := operator.StoreKey(tr, "api", "pg1")
	require.NoError(t, err)
	assert.Equal(t, "api:pg1", sk)
	long := strings.Repeat("x", 201)
	sk, err = operator.StoreKey(tr, "api", long)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(sk, "api:sha256:"), sk)
}

// TestUsageNoUsage: a store that cannot report usage gives ErrNoUsage.
func TestUsageNoUsage(t *testing.T) {
	t.Parallel()
	tr, err := throttle.New(nil, fakestore.New(),
		throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(1)}}))
	require.NoError(t, err)
	_, err = operator.Usage(context.Background(), tr, "api", "k")
	require.ErrorIs(t, err, operator.ErrNoUsage)
}

// TestUsageUpstream: what the upstream said of a key (a pause after a 429)
// shows in its usage, with the cause of the next slot.
func TestUsageUpstream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st, err := store.NewMemory()
		require.NoError(t, err)
		tr, err := throttle.New(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			h := http.Header{"Retry-After": {"30"}}
			return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h, Body: http.NoBody, Request: r}, nil
		}), st, throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(10)},
			Key: throttle.Fixed("k"), NoDefaultPace: true}))
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()

		u, err := operator.Usage(context.Background(), tr, "api", "k")
		require.NoError(t, err)
		assert.Equal(t, throttle.SlidingLog, u.Algorithm)
		assert.Equal(t, 30*time.Second, u.Pause)
		assert.Equal(t, 30*time.Second, u.Next)
		assert.Equal(t, operator.CauseUpstream, u.NextCause)
		assert.Equal(t, 1, u.Limits[0].Used+u.Limits[0].Reserved, "the request sent")
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestUsageLearnedMargin: the margin a 429 at a window's edge taught the
// fleet shows in the key's usage, with how long it holds.
func TestUsageLearnedMargin(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st, err := store.NewMemory()
		require.NoError(t, err)
		n := 0
		tr, err := throttle.New(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			n++
			if n == 3 { // at the window's edge
				return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}, Body: http.NoBody, Request: r}, nil
			}
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		}), st, throttle.WithRule(throttle.Rule{Name: "api", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(2)},
			Key: throttle.Fixed("k"), Margin: 10 * time.Millisecond}))
		require.NoError(t, err)
		for range 3 {
			req, err := http.NewRequest(http.MethodGet, "https://api.example.com/", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
		}
		time.Sleep(time.Second)
		u, err := operator.Usage(context.Background(), tr, "api", "k")
		require.NoError(t, err)
		assert.Equal(t, 10*time.Millisecond, u.LearnedMargin)
		assert.Equal(t, 10*time.Minute-time.Second, u.LearnedMarginFor)
		assert.Equal(t, time.Second, u.LearnedMarginChanged)
		assert.Zero(t, u.LearnedPace, "the key keeps its pace")
	})
}
