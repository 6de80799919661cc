package throttle

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/throttle-go/throttle/internal/engine"
)

// TestPacedLateWakeRetakes: a paced rule's slots have only Margin/N to spare
// (25µs at 100/s and the default margin), so a request that wakes later than
// its allowance plus half of that retakes its slot, where a window rule would
// keep it up to half the margin; the next send then keeps the spacing.
func TestPacedLateWakeRetakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		oversleep   time.Duration
		wantRetaken int
	}{
		{"late within the slack", 10 * time.Microsecond, 0},
		{"late beyond it, within half the margin", time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRecorder(t, Paced(100, time.Second, 0))
				tr, send := r.tr, r.send
				send()
				tr.eng.Sleep = func(ctx context.Context, d time.Duration) error {
					tr.eng.Sleep = engine.PreciseSleep
					return engine.PreciseSleep(ctx, d+tc.oversleep)
				}
				send() // wakes late
				send()
				require.Len(t, r.sent, 3)
				assert.Equal(t, tc.wantRetaken, r.decisions[1].Retaken)
				for i := 1; i < 3; i++ {
					assert.GreaterOrEqual(t, r.sent[i].Sub(r.sent[i-1]), 10*time.Millisecond, "send %d keeps the spacing", i)
				}
			})
		})
	}
}

// TestDefaultPaceLateWakeKeepsItsSlot: the default pace states no limit, so a
// request under it that wakes later than its allowance by less than half the
// margin sends on its slot, as under a window rule; once a 429 has moved the
// key to a learned pace (no burst, Margin/N to spare), the same lateness
// retakes the slot.
func TestDefaultPaceLateWakeKeepsItsSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		refuseFirst bool
		wantRetaken int
	}{
		{"under the default pace", false, 0},
		{"under a learned pace", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				calls := 0
				var decisions []Decision
				tr, err := New(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
					calls++
					status := http.StatusOK
					if tc.refuseFirst && calls == 1 {
						status = http.StatusTooManyRequests
					}
					return &http.Response{StatusCode: status, Body: http.NoBody, Request: req}, nil
				}), newMemoryStore(t),
					WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerSecond(100)}}),
					WithOnDecision(func(d Decision) { decisions = append(decisions, d) }))
				require.NoError(t, err)
				Measured(tr)
				send := func() {
					req, err := http.NewRequest(http.MethodGet, "https://pg.example/v1/charges", nil)
					require.NoError(t, err)
					resp, err := tr.RoundTrip(req)
					require.NoError(t, err)
					resp.Body.Close()
				}
				send()
				send() // waits for its slot (the pace starts slowly, or the 429's pause)
				tr.eng.Sleep = func(ctx context.Context, d time.Duration) error {
					tr.eng.Sleep = engine.PreciseSleep
					return engine.PreciseSleep(ctx, d+time.Millisecond)
				}
				send() // wakes 1ms late
				require.Len(t, decisions, 3)
				require.Positive(t, decisions[2].Delay, "it waited for its slot")
				assert.Equal(t, tc.wantRetaken, decisions[2].Retaken)
			})
		})
	}
}
