package throttletest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/throttletest"
)

// recorder is a testing.TB that records what a check reports.
type recorder struct {
	testing.TB
	errors, fatals []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Error(args ...any)         { r.errors = append(r.errors, fmt.Sprint(args...)) }
func (r *recorder) Fatal(args ...any)         { r.fatals = append(r.fatals, fmt.Sprint(args...)) }
func (r *recorder) Errorf(f string, a ...any) { r.errors = append(r.errors, fmt.Sprintf(f, a...)) }

// stepClock is a clock that moves by step at each reading.
func stepClock(step time.Duration) func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(step); return t }
}

func hit(t *testing.T, up *throttletest.Upstream, key string, times int) {
	for range times {
		r := httptest.NewRequest("GET", "/?key="+key, nil)
		up.ServeHTTP(httptest.NewRecorder(), r)
	}
}

func newUpstream(t *testing.T, n int, w time.Duration, step time.Duration) *throttletest.Upstream {
	up, err := throttletest.NewUpstream(throttletest.Config{N: n, Window: w, Now: stepClock(step),
		Key: func(r *http.Request) string { return r.URL.Query().Get("key") }})
	require.NoError(t, err)
	return up
}

func TestRequireNoRejections(t *testing.T) {
	up := newUpstream(t, 2, time.Second, 100*time.Millisecond)
	rec := &recorder{}
	hit(t, up, "a", 2)
	up.RequireNoRejections(rec)
	assert.Empty(t, rec.fatals)
	hit(t, up, "a", 9)
	up.RequireNoRejections(rec)
	require.Len(t, rec.fatals, 1)
	assert.Equal(t, `throttletest: the upstream (2 per 1s) answered 429 to 8 of 11 requests; the first:
  key "a" at +200ms
  key "a" at +300ms
  key "a" at +400ms
  key "a" at +500ms
  key "a" at +600ms
  … and 3 more`, rec.fatals[0])
}

func TestAssertWithin(t *testing.T) {
	up := newUpstream(t, 100, time.Second, 100*time.Millisecond)
	hit(t, up, "a", 3)
	hit(t, up, "b", 1)
	rec := &recorder{}
	assert.True(t, up.AssertWithin(rec, 3, time.Second))
	assert.True(t, up.AssertWithin(rec, 1, 100*time.Millisecond), "the window (t-w, t] holds one arrival each 100ms")
	assert.False(t, up.AssertWithin(rec, 2, time.Second))
	require.Len(t, rec.errors, 1)
	assert.Equal(t, `throttletest: key "a": 3 requests arrived within 1s, more than 2; they arrived at:
  +0s
  +100ms
  +200ms`, rec.errors[0])
	assert.Empty(t, rec.fatals)
}

// A test of a client checks the upstream at its end: no 429, and a tighter
// share than the upstream's limit kept. (Here the clock moves 100ms per
// request, and the "client" sends too fast.)
func ExampleUpstream_RequireNoRejections() {
	up, _ := throttletest.NewUpstream(throttletest.Config{N: 2, Window: time.Second, Now: stepClock(100 * time.Millisecond)})
	for range 4 {
		up.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	t := &recorder{} // in a test: the *testing.T
	up.RequireNoRejections(t)
	up.AssertWithin(t, 1, time.Second)
	fmt.Println(t.fatals[0])
	fmt.Println(t.errors[0])
	// Output:
	// throttletest: the upstream (2 per 1s) answered 429 to 2 of 4 requests; the first:
	//   key "" at +200ms
	//   key "" at +300ms
	// throttletest: key "": 2 requests arrived within 1s, more than 1; they arrived at:
	//   +0s
	//   +100ms
}
