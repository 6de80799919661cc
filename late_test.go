package throttle

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/store"
)

// TestLateWakeRetakesTheSlot: a request that wakes later than its allowance
// (here 0 at first: synctest's clock measures no lateness) plus half the
// margin after its slot gives it back and takes the next free one, so that it
// is recorded when it is really sent; one that wakes within it keeps its slot.
func TestLateWakeRetakesTheSlot(t *testing.T) {
	for _, tc := range []struct {
		name        string
		oversleep   []time.Duration // added to each sleep in turn
		wantRetaken int
	}{
		{"on time", nil, 0},
		{"late within half the margin", []time.Duration{DefaultMargin / 2}, 0},
		{"late beyond half the margin", []time.Duration{DefaultMargin/2 + time.Millisecond}, 1},
		{"late again and again", []time.Duration{time.Second, time.Second, time.Second, time.Second}, maxRetakes},
		{"very late, once", []time.Duration{time.Second + DefaultMargin/2 + time.Millisecond, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRecorder(t, PerSecond(1))
				tr, send := r.tr, r.send
				send() // at once: the log now holds one entry
				extra := tc.oversleep
				tr.sleep = func(ctx context.Context, d time.Duration) error {
					if len(extra) > 0 {
						d += extra[0]
						extra = extra[1:]
					}
					return sleep(ctx, d)
				}
				send() // its slot is a window and a margin later; it wakes late
				tr.sleep = sleep
				send() // on time
				sent, decisions := r.sent, r.decisions
				require.Len(t, sent, 3)
				assert.Equal(t, tc.wantRetaken, decisions[1].Retaken)
				assert.GreaterOrEqual(t, sent[1].Sub(sent[0]), time.Second+DefaultMargin)
				if tc.wantRetaken < maxRetakes {
					// The late send was recorded within half the margin of
					// when it really went, so the next one keeps at least
					// half the margin of headroom at the upstream.
					assert.GreaterOrEqual(t, sent[2].Sub(sent[1]), time.Second+DefaultMargin/2)
				}
			})
		})
	}
}

// recorder is a Transport on a memory store with one rule for pg.example,
// whose base records when each request is sent, and which records every
// Decision; it runs in one goroutine (synctest).
type recorder struct {
	t         *testing.T
	tr        *Transport
	sent      []time.Time
	decisions []Decision
}

func newRecorder(t *testing.T, limits ...Limit) *recorder {
	st, err := store.NewMemory()
	require.NoError(t, err)
	r := &recorder{t: t}
	r.tr, err = New(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		r.sent = append(r.sent, time.Now())
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
	}), st,
		WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: limits}),
		WithOnDecision(func(d Decision) { r.decisions = append(r.decisions, d) }))
	require.NoError(t, err)
	return r
}

// send sends one request and requires a response.
func (r *recorder) send() {
	req, err := http.NewRequest(http.MethodGet, "https://pg.example/v1/charges", nil)
	require.NoError(r.t, err)
	resp, err := r.tr.RoundTrip(req)
	require.NoError(r.t, err)
	resp.Body.Close()
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
