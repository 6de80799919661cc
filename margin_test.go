package throttle_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestMarginLearnedAtWindowEdge: a 429 to a request whose slot the window
// limit placed (the default pace would have let it go at once) widens the
// key's margin, fleet-wide: the next slot at a window edge waits the
// rule's margin twice, on another transport too, and the key keeps its
// pace. After 30s without a refusal the transport that widened it probes it
// halfway back.
func TestMarginLearnedAtWindowEdge(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		up := &scripted{answers: []func(*http.Request) *http.Response{ok200, ok200, answer(429, "", "Retry-After", "1"),
			ok200, ok200, ok200, ok200, ok200}}
		var fbs feedbackLog
		edge := rule(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{throttle.PerSecond(2)} // paced by default: burst 2, so the window sets the third slot
			r.Margin = 10 * time.Millisecond
		})
		a := newTransport(t, up, st, fbs.option(), edge)
		b := newTransport(t, up, st, edge)
		send := func(tr http.RoundTripper) time.Duration {
			return elapsed(func() {
				_, err := do(t, tr, context.Background())
				require.NoError(t, err)
			})
		}
		ms := time.Millisecond
		assert.Zero(t, send(a))
		assert.Zero(t, send(a))
		assert.Equal(t, 1010*ms, send(a), "at the window's edge; answered 429")
		got := fbs.all()
		require.Len(t, got, 1)
		assert.Equal(t, time.Second, got[0].Pause, "the stated wait, whole")
		assert.Zero(t, got[0].Paced, "the key keeps its pace")

		assert.Equal(t, time.Second, send(a), "the pause")
		assert.Equal(t, 20*ms, send(b), "the window's edge with the margin doubled (10ms with the rule's), on the other transport too")

		time.Sleep(31 * time.Second)
		assert.Zero(t, send(a), "30s quiet: the answer probes the margin")
		assert.Zero(t, send(a))
		assert.Equal(t, 1015*ms, send(b), "halfway back: 5ms beyond the rule's")
		assert.Zero(t, a.Stats().Total().Upstream.Reshapes)
	})
}

// TestMarginCoversMeasuredSpread: the margin a refusal at a window edge
// teaches covers the spread the transport measured from its slots to the
// answers (here 30ms: one answer took 30ms, the others none), when that is
// more than twice the rule's margin.
func TestMarginCoversMeasuredSpread(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		slow := func(r *http.Request) *http.Response {
			time.Sleep(30 * time.Millisecond)
			return ok200(r)
		}
		up := &scripted{answers: []func(*http.Request) *http.Response{slow, ok200, answer(429, "", "Retry-After", "1"), ok200, ok200}}
		edge := rule(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{throttle.PerSecond(2)}
			r.Margin = 10 * time.Millisecond
		})
		a := newTransport(t, up, st, edge)
		b := newTransport(t, up, st, edge)
		send := func(tr http.RoundTripper) time.Duration {
			return elapsed(func() {
				_, err := do(t, tr, context.Background())
				require.NoError(t, err)
			})
		}
		ms := time.Millisecond
		assert.Equal(t, 30*ms, send(a), "answered in 30ms")
		assert.Zero(t, send(a))
		assert.Equal(t, 980*ms, send(a), "at the window's edge; answered 429")
		assert.Equal(t, time.Second, send(a), "the pause")
		assert.Equal(t, 30*ms, send(b), "the window's edge with a margin of the spread measured, 30ms")
	})
}

// TestMarginReported: the refusal at a window's edge reports the margin it
// widened the key's windows to (Feedback.Margin), and the probe after 30s
// without a refusal reports the margin it narrowed them to (Eased); the
// rule's Stats count each.
func TestMarginReported(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		up := &scripted{answers: []func(*http.Request) *http.Response{ok200, ok200, answer(429, "", "Retry-After", "1"), ok200, ok200}}
		var fbs feedbackLog
		a := newTransport(t, up, st, fbs.option(), rule(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{throttle.PerSecond(2)}
			r.Margin = 10 * time.Millisecond
		}))
		send := func() {
			_, err := do(t, a, context.Background())
			require.NoError(t, err)
		}
		send()
		send()
		send() // at the window's edge: 429
		got := fbs.all()
		require.Len(t, got, 1)
		assert.Equal(t, 10*time.Millisecond, got[0].Margin, "twice the rule's margin: 10ms beyond it")
		assert.False(t, got[0].Eased)
		u := a.Stats().Total().Upstream
		assert.Equal(t, uint64(1), u.Widenings)
		assert.Zero(t, u.Easings)

		time.Sleep(31 * time.Second)
		send() // quiet for 30s: this answer probes the margin
		send()
		got = fbs.all()
		require.Len(t, got, 2, "the probe reports once")
		assert.Equal(t, throttle.Feedback{Rule: "api", Key: got[0].Key, Status: http.StatusOK, Margin: 5 * time.Millisecond, Eased: true}, got[1])
		u = a.Stats().Total().Upstream
		assert.Equal(t, uint64(1), u.Widenings)
		assert.Equal(t, uint64(1), u.Easings)
	})
}
