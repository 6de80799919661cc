package throttle

import (
	"context"
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
