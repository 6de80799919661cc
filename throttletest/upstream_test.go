package throttletest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func byHeader(r *http.Request) string { return r.Header.Get("X-Key") }

// hit sends n requests for key from the given number of goroutines and
// returns how many got 200 and 429.
func hit(t *testing.T, url, key string, goroutines, n int) (ok, tooMany int) {
	t.Helper()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	for range goroutines {
		wg.Go(func() {
			for range jobs {
				req, err := http.NewRequest(http.MethodGet, url, nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("X-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				switch resp.StatusCode {
				case http.StatusOK:
					ok++
				case http.StatusTooManyRequests:
					tooMany++
				default:
					t.Errorf("unexpected status %d", resp.StatusCode)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ok, tooMany
}

func TestRejectsExactlyTheExcessPerKey(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	u, err := NewUpstream(Config{N: 10, Window: time.Second, Key: byHeader, Now: clock.Now})
	require.NoError(t, err)
	srv := httptest.NewServer(u)
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()

	for _, key := range []string{"a", "b"} {
		ok, tooMany := hit(t, srv.URL, key, 8, 25)
		require.Equal(t, 10, ok, "key %s", key)
		require.Equal(t, 15, tooMany, "key %s", key)
	}

	st := u.Stats()
	require.Equal(t, 20, st.Total.Accepted)
	require.Equal(t, 30, st.Total.Rejected)
	require.Len(t, st.Total.Arrivals, 20)
	for _, key := range []string{"a", "b"} {
		ks := st.Keys[key]
		require.Equal(t, 10, ks.Accepted)
		require.Equal(t, 15, ks.Rejected)
		require.Equal(t, clock.Now(), ks.FirstAccepted)
	}
}

func TestSlidingWindowOnArrival(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	u, err := NewUpstream(Config{N: 2, Window: time.Second, Now: clock.Now})
	require.NoError(t, err)

	// Each step: how far the clock moves, then the status of one request.
	steps := []struct {
		name    string
		advance time.Duration
		want    int
	}{
		{"first at 0", 0, http.StatusOK},
		{"second at 0.4s", 400 * time.Millisecond, http.StatusOK},
		{"third at 0.9s: two in (-0.1s, 0.9s]", 500 * time.Millisecond, http.StatusTooManyRequests},
		{"at exactly 1s the first has left (0s, 1s]", 100 * time.Millisecond, http.StatusOK},
		{"at 1.3s: 0.4s and 1s in (0.3s, 1.3s]", 300 * time.Millisecond, http.StatusTooManyRequests},
		{"at 1.4s: 0.4s has left", 100 * time.Millisecond, http.StatusOK},
		{"at 1.5s: 1s and 1.4s", 100 * time.Millisecond, http.StatusTooManyRequests},
	}
	for _, s := range steps {
		clock.Add(s.advance)
		rec := httptest.NewRecorder()
		u.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		require.Equal(t, s.want, rec.Code, s.name)
		if s.want == http.StatusTooManyRequests {
			require.NotEmpty(t, rec.Header().Get("Retry-After"), s.name)
		}
	}
	st := u.Stats()
	require.Equal(t, 4, st.Total.Accepted)
	require.Equal(t, 3, st.Total.Rejected)
	base := time.Unix(1000, 0)
	want := []time.Time{base, base.Add(400 * time.Millisecond), base.Add(time.Second), base.Add(1400 * time.Millisecond)}
	require.Equal(t, want, st.Keys[""].Arrivals)
}

func TestTransitStillExact(t *testing.T) {
	// With transit delay, arrivals are reordered but the count is exact:
	// the window is long enough that nothing leaves it during the test.
	u, err := NewUpstream(Config{N: 7, Window: time.Hour, Transit: 2 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(u)
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()
	ok, tooMany := hit(t, srv.URL, "", 6, 20)
	require.Equal(t, 7, ok)
	require.Equal(t, 13, tooMany)
}

func TestNewRejectsBadConfig(t *testing.T) {
	for i, c := range []Config{
		{N: 0, Window: time.Second},
		{N: 1, Window: 0},
		{N: 1, Window: time.Second, Transit: -1},
	} {
		_, err := NewUpstream(c)
		require.Error(t, err, fmt.Sprint(i))
	}
}

func TestRateLimitHeaders(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	u, err := NewUpstream(Config{N: 2, Window: 2 * time.Second, Now: clock.Now, IETF: true, XRateLimit: true})
	require.NoError(t, err)
	get := func() http.Header {
		rec := httptest.NewRecorder()
		u.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec.Header()
	}
	h := get()
	require.Equal(t, `"default";q=2;w=2`, h.Get("RateLimit-Policy"))
	require.Equal(t, `"default";r=1;t=2`, h.Get("RateLimit"))
	require.Equal(t, "2", h.Get("X-RateLimit-Limit"))
	require.Equal(t, "1", h.Get("X-RateLimit-Remaining"))
	require.Equal(t, "1002", h.Get("X-RateLimit-Reset"))
	clock.Add(500 * time.Millisecond)
	h = get()
	require.Equal(t, `"default";r=0;t=2`, h.Get("RateLimit"), "1.5s rounded up")
	clock.Add(100 * time.Millisecond)
	h = get()
	require.Equal(t, "2", h.Get("Retry-After"), "1.4s rounded up")
	require.Equal(t, `"default";r=0;t=2`, h.Get("RateLimit"))
	require.Equal(t, "0", h.Get("X-RateLimit-Remaining"))

	u, err = NewUpstream(Config{N: 1, Window: time.Second, Now: clock.Now, NoRetryAfter: true})
	require.NoError(t, err)
	get()
	h = get()
	require.Empty(t, h.Get("Retry-After"))
	require.Empty(t, h.Get("RateLimit"))
	_, err = NewUpstream(Config{N: 1, Window: 1500 * time.Millisecond, IETF: true})
	require.Error(t, err, "IETF windows are whole seconds")
}

// TestAlgorithms checks each algorithm's answers, step by step, on a fake clock.
func TestAlgorithms(t *testing.T) {
	type step struct {
		name    string
		advance time.Duration
		want    int
		retry   string // Retry-After of a 429
	}
	for _, tc := range []struct {
		cfg   Config
		steps []step
	}{
		{Config{N: 10, Window: time.Second, Algorithm: GCRA, Burst: 2}, []step{
			{"burst 1", 0, http.StatusOK, ""},
			{"burst 2", 0, http.StatusOK, ""},
			{"burst 3", 0, http.StatusOK, ""},
			{"the bucket is empty", 0, http.StatusTooManyRequests, "1"},
			{"one spacing later", 100 * time.Millisecond, http.StatusOK, ""},
			{"half a spacing later", 50 * time.Millisecond, http.StatusTooManyRequests, "1"},
			{"the next spacing", 50 * time.Millisecond, http.StatusOK, ""},
			{"idle: the burst again", time.Second, http.StatusOK, ""},
			{"idle: 2", 0, http.StatusOK, ""},
			{"idle: 3", 0, http.StatusOK, ""},
			{"idle: 4", 0, http.StatusTooManyRequests, "1"},
		}},
		{Config{N: 10, Window: time.Second, Algorithm: GCRA}, []step{
			{"first", 0, http.StatusOK, ""},
			{"1µs short of the spacing", 100*time.Millisecond - time.Microsecond, http.StatusTooManyRequests, "1"},
			{"at the spacing", time.Microsecond, http.StatusOK, ""},
			{"a refusal counts nothing", 100 * time.Millisecond, http.StatusOK, ""},
		}},
		{Config{N: 2, Window: time.Second, Algorithm: FixedWindow}, []step{
			{"0.9s", 900 * time.Millisecond, http.StatusOK, ""},
			{"0.95s", 50 * time.Millisecond, http.StatusOK, ""},
			{"0.99s: the window is full", 40 * time.Millisecond, http.StatusTooManyRequests, "1"},
			{"1.0s: a new window", 10 * time.Millisecond, http.StatusOK, ""},
			{"1.0s: 2 in 100ms", 0, http.StatusOK, ""},
			{"1.0s: full", 0, http.StatusTooManyRequests, "1"},
		}},
	} {
		t.Run(tc.cfg.Algorithm.String(), func(t *testing.T) {
			clock := &fakeClock{t: time.Unix(1000, 0)}
			tc.cfg.Now = clock.Now
			u, err := NewUpstream(tc.cfg)
			require.NoError(t, err)
			accepted := 0
			for _, s := range tc.steps {
				clock.Add(s.advance)
				rec := httptest.NewRecorder()
				u.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
				require.Equal(t, s.want, rec.Code, s.name)
				require.Equal(t, s.retry, rec.Header().Get("Retry-After"), s.name)
				if s.want == http.StatusOK {
					accepted++
				}
			}
			require.Equal(t, accepted, u.Stats().Total.Accepted)
		})
	}
	for i, c := range []Config{
		{N: 1, Window: time.Second, Burst: 1},
		{N: 1, Window: time.Second, Algorithm: GCRA, Burst: -1},
		{N: 1, Window: time.Second, Algorithm: Algorithm(7)},
		{N: 10, Window: 5 * time.Nanosecond, Algorithm: GCRA},
	} {
		_, err := NewUpstream(c)
		require.Error(t, err, fmt.Sprint(i))
	}
}

// TestMaxInFlight: with MaxInFlight, a request arriving while that many are
// being answered gets a 429 at once; one arriving after an answer is done
// is accepted.
func TestMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, err := NewUpstream(Config{N: 100, Window: time.Second, MaxInFlight: 2, ServiceTime: time.Second})
		require.NoError(t, err)
		get := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			u.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			return rec
		}
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i := range codes {
			wg.Go(func() { codes[i] = get().Code })
		}
		synctest.Wait() // both in flight
		start := time.Now()
		require.Equal(t, http.StatusTooManyRequests, get().Code)
		require.Zero(t, time.Since(start), "refused at once")
		wg.Wait()
		require.Equal(t, []int{http.StatusOK, http.StatusOK}, codes)
		require.Equal(t, http.StatusOK, get().Code)
		st := u.Stats()
		require.Equal(t, 1, st.Total.Rejected)
		require.Equal(t, []int{1, 2, 1}, st.Keys[""].InFlight)
	})
	_, err := NewUpstream(Config{N: 1, Window: time.Second, MaxInFlight: -1})
	require.Error(t, err)
}
