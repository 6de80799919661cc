package throttle_test

import (
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// gated is an upstream whose first request waits for open, then is answered
// first; every other request is answered rest at once. It records when each
// arrived, by its X-Name header.
type gated struct {
	open        chan struct{}
	first, rest func(*http.Request) *http.Response
	mu          sync.Mutex
	n           int
	at          map[string]time.Time
}

func newGated(first, rest func(*http.Request) *http.Response) *gated {
	return &gated{open: make(chan struct{}), first: first, rest: rest, at: map[string]time.Time{}}
}

func (g *gated) RoundTrip(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	g.n++
	n := g.n
	g.at[r.Header.Get("X-Name")] = time.Now()
	g.mu.Unlock()
	if n == 1 {
		<-g.open
		return g.first(r), nil
	}
	return g.rest(r), nil
}

func (g *gated) arrived(name string) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.at[name]
}

// named sends a GET named name through tr on its own goroutine.
func named(t *testing.T, wg *sync.WaitGroup, tr http.RoundTripper, name string) {
	wg.Go(func() {
		req, err := http.NewRequest(http.MethodGet, "https://api.example.com/v1/items", nil)
		require.NoError(t, err)
		req.Header.Set("X-Name", name)
		resp, err := tr.RoundTrip(req)
		if assert.NoError(t, err, name) {
			_ = resp.Body.Close()
		}
	})
}

// retakenBy returns the Retaken of each decision by the request's arrival
// order: decisions are reported before the send.
func retakes(d *decisionLog) []int {
	var out []int
	for _, x := range d.all() {
		out = append(out, x.Retaken)
	}
	return out
}

// TestWaitersRetakeAfterTheirPause: requests waiting for their slots when
// their own process records a pause (a 429 with Retry-After) do not send
// into it: the one whose slot lies within the pause takes a new slot at its
// end; the one whose slot lies beyond it keeps its slot.
func TestWaitersRetakeAfterTheirPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		up := newGated(answer(429, "", "Retry-After", "0.15"), ok200)
		var decisions decisionLog
		tr := newTransport(t, up, nil, decisions.option(), throttle.WithRule(throttle.Rule{
			Host: "api.example.com", Key: throttle.Fixed("k"), Margin: throttle.NoMargin,
			Limits: []throttle.Limit{throttle.Paced(10, time.Second, 0)},
		}))
		start := time.Now()
		var wg sync.WaitGroup
		named(t, &wg, tr, "first") // slot 0: sent, held at the upstream
		synctest.Wait()
		named(t, &wg, tr, "inside") // slot 100ms
		synctest.Wait()
		named(t, &wg, tr, "beyond") // slot 200ms
		synctest.Wait()
		close(up.open) // the 429: paused until 150ms
		wg.Wait()
		ms := time.Millisecond
		assert.Equal(t, 300*ms, up.arrived("inside").Sub(start), "retaken: after the pause and the slot of 200ms")
		assert.Equal(t, 200*ms, up.arrived("beyond").Sub(start), "its slot was after the pause")
		assert.Equal(t, []int{0, 0, 1}, retakes(&decisions), "first, beyond, then inside after its retake")
		assert.Equal(t, uint64(1), tr.Stats().Rules[0].Retakes)
	})
}

// TestWaitersRetakeAfterAMoveElsewhere: another process's 429 moves the key
// to a pace without a burst while this one's requests wait; this process
// hears of it in the reply to its next reservation (Reservation.Reshaped,
// and the pause that set the slot), and its waiters placed before the move
// take new slots instead of sending on the old shape or into the pause.
func TestWaitersRetakeAfterAMoveElsewhere(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		r := throttle.Rule{Host: "api.example.com", Key: throttle.Fixed("k"), Margin: throttle.NoMargin,
			Limits: []throttle.Limit{throttle.PerSecond(100)}} // the default shape: paced, a burst of 9 earned
		elsewhere := newGated(answer(429, ""), ok200)
		a := newTransport(t, elsewhere, st, throttle.WithRule(r))
		up := newGated(ok200, ok200)
		close(up.open)
		var decisions decisionLog
		b := newTransport(t, up, st, decisions.option(), throttle.WithRule(r))
		start := time.Now()
		var wg sync.WaitGroup
		named(t, &wg, a, "elsewhere") // slot 0, held at its upstream
		synctest.Wait()
		named(t, &wg, b, "w1") // slot 10ms
		named(t, &wg, b, "w2") // slot 20ms
		synctest.Wait()
		time.Sleep(time.Millisecond)
		close(elsewhere.open) // the 429 at 1ms: the key moves; paused two spacings, to 21ms
		synctest.Wait()
		time.Sleep(time.Millisecond)
		named(t, &wg, b, "w3") // at 2ms: its reply tells b of the move and the pause
		wg.Wait()
		ms := time.Millisecond
		for _, name := range []string{"w1", "w2", "w3"} {
			assert.GreaterOrEqual(t, up.arrived(name).Sub(start), 21*ms, "%s: not before the pause's end", name)
		}
		retaken := 0
		for _, x := range retakes(&decisions) {
			retaken += x
		}
		assert.Equal(t, 2, retaken, "w1 and w2, placed before the move")
	})
}
