package throttle

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/store"
)

// TestAllowanceFollowsALateProcess: a process that sends one request in four
// 8ms after its slot (the others on time) retakes its first late slots, then
// reserves with an allowance of 8ms, so that the upstream still sees a full
// Margin between a send and the N-th after it. (Without the allowance in the
// log, an on-time send comes 8ms too early after a late one.)
func TestAllowanceFollowsALateProcess(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t, Per(3, time.Second))
		tr := r.tr
		const late = 8 * time.Millisecond
		calls := 0
		tr.eng.Sleep = func(ctx context.Context, d time.Duration) error {
			calls++
			if calls%4 == 1 {
				d += late
			}
			return engine.PreciseSleep(ctx, d)
		}
		for range 16 {
			r.send()
		}
		sent, decisions := r.sent, r.decisions
		retaken := 0
		for _, d := range decisions {
			retaken += d.Retaken
		}
		// Allowance 0 is too small for 8ms (beyond half the margin), then
		// it is 8ms.
		assert.Equal(t, 1, retaken)
		assert.Equal(t, late, decisions[len(decisions)-1].Allowance)
		for i := 3; i < len(sent); i++ {
			assert.GreaterOrEqual(t, sent[i].Sub(sent[i-3]), time.Second+DefaultMargin/2, "send %d", i)
		}
		for i := 4; i < len(sent); i++ {
			assert.GreaterOrEqual(t, sent[i].Sub(sent[i-3]), time.Second+DefaultMargin, "send %d, after the allowance settled", i)
		}
	})
}

// TestMixedProcessesShareALog: a late process and a prompt one reserve on
// the same store (two transports, as two processes would). The late one's
// allowance makes the log count its requests when they really go, so the
// upstream never sees more than N sends in W (without it: 975ms between a
// send and the N-th after it), and the prompt one never retakes a slot.
func TestMixedProcessesShareALog(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st, err := store.NewMemory()
		require.NoError(t, err)
		var mu sync.Mutex
		var sent []time.Time
		base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			sent = append(sent, time.Now())
			mu.Unlock()
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
		})
		rule := Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{Per(5, time.Second)}}
		var retaken sync.Map
		newTransport := func(name string, late time.Duration) *Transport {
			tr, err := New(base, st, WithRule(rule), WithOnDecision(func(d Decision) {
				if d.Retaken > 0 {
					retaken.Store(name, d.Retaken)
				}
			}))
			require.NoError(t, err)
			tr.eng.Sleep = func(ctx context.Context, d time.Duration) error { return engine.PreciseSleep(ctx, d+late) }
			return tr
		}
		var wg sync.WaitGroup
		late, prompt := newTransport("late", 30*time.Millisecond), newTransport("prompt", 0)
		// More workers than N, so that the N-th entry before a reservation
		// is another worker's: with one worker per unit of N, each would
		// follow its own previous send, and a constant lateness cancels.
		for i, tr := range []*Transport{late, prompt, late, prompt, prompt, prompt, prompt} {
			{
				wg.Go(func() {
					for range 10 {
						req, err := http.NewRequest(http.MethodGet, "https://pg.example/v1/charges", nil)
						if !assert.NoError(t, err) {
							return
						}
						resp, err := tr.RoundTrip(req)
						if !assert.NoError(t, err, "transport %d", i) {
							return
						}
						resp.Body.Close()
					}
				})
			}
		}
		wg.Wait()
		_, promptRetook := retaken.Load("prompt")
		assert.False(t, promptRetook, "the prompt process is never late")
		slices.SortFunc(sent, func(a, b time.Time) int { return a.Compare(b) })
		require.Len(t, sent, 70)
		// The late process's first request retakes its slot twice while
		// its allowance grows (0, 20ms, 30ms); from then on every send is
		// within its allowance, and at least half the margin is left.
		least := time.Hour
		for i := 5; i < len(sent); i++ {
			least = min(least, sent[i].Sub(sent[i-5]))
		}
		t.Logf("least gap between a send and the 5th after it: %v", least)
		assert.GreaterOrEqual(t, least, time.Second+DefaultMargin/2)
	})
}

// TestFirstCallIsNotLockedOut: a process that has measured nothing reserves
// with a cautious allowance (half the margin, its wire being guarded), so the
// store does not hold its slot back to the log's last entry, which another
// process's allowance put in the future: a FailFast request gets the free
// slot. (With no allowance it would be refused.)
func TestFirstCallIsNotLockedOut(t *testing.T) {
	t.Parallel()
	st, err := store.NewMemory()
	require.NoError(t, err)
	rule := Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerHour(100)}, FailFast: true, NoDefaultPace: true}
	var decisions []Decision
	tr, err := New(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
	}), st, WithRule(rule), WithOnDecision(func(d Decision) { decisions = append(decisions, d) }))
	require.NoError(t, err)
	c := tr.rules[0]
	// Another process, with an allowance of a minute, reserved just now.
	_, err = st.Reserve(context.Background(), c.scope+"pg1", contract.Request{Limits: c.plan.Limits, Cost: 1, Allowance: time.Minute})
	require.NoError(t, err)

	req, err := http.NewRequest(http.MethodGet, "https://pg.example/v1/charges", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err, "the cautious allowance takes the free slot")
	resp.Body.Close()
	require.Len(t, decisions, 1)
	assert.Equal(t, DefaultMargin/2, decisions[0].Allowance)
}

// wireBase is a base transport that reports the connection of each request
// (as net/http does, through httptrace) after dial[i] for the i-th request
// (none past the list's end), and records when each request went on the
// wire.
type wireBase struct {
	dial []time.Duration
	n    int
	sent []time.Time
}

func (b *wireBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if b.n < len(b.dial) {
		time.Sleep(b.dial[b.n])
	}
	b.n++
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{})
	}
	b.sent = append(b.sent, time.Now())
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestColdStartOnTheWire: a process's first requests reserve with a cautious
// allowance, half the margin, since a request that gets its connection late
// is retaken on the wire; its first sample ends it, and a measurement on the
// wire, dial included, raises the allowance of later reservations. Nothing
// guessed is charged to the reservations after the first sample: a fleet
// that starts with many requests at once does not push a paced schedule
// back by a guess per request.
func TestColdStartOnTheWire(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const dial = 3 * time.Millisecond
		var decisions []Decision
		base := &wireBase{dial: []time.Duration{dial, dial, dial}}
		tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerSecond(100)}, NoDefaultPace: true}),
			WithOnDecision(func(d Decision) { decisions = append(decisions, d) }))
		require.NoError(t, err)
		sendPG(t, tr, 3)
		require.Len(t, decisions, 3)
		assert.Equal(t, DefaultMargin/2, decisions[0].Allowance, "nothing measured yet")
		assert.Equal(t, dial, decisions[1].Allowance, "measured on the wire, the dial included")
		assert.Equal(t, dial, decisions[2].Allowance)
		assert.Zero(t, tr.Stats().Rules[0].Retakes, "each dial within the allowance plus half the margin")
		assert.True(t, tr.eng.Guarded())
	})
}

// TestRetakeOnTheWire: a request that gets its connection later than its
// allowance plus half the margin after its slot (a slow dial) takes a new
// slot before it is written, waits for it, and gives the old one back, so
// that it goes on the wire within that bound of the slot it is recorded at.
func TestRetakeOnTheWire(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const dial = 50 * time.Millisecond
		base := &wireBase{dial: []time.Duration{0, dial}}
		var decisions []Decision
		var reported []time.Time
		tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerSecond(2)}}),
			WithOnDecision(func(d Decision) { decisions, reported = append(decisions, d), append(reported, time.Now()) }))
		require.NoError(t, err)
		start := time.Now()
		sendPG(t, tr, 2)
		require.Len(t, base.sent, 2)
		// The Decision is reported once, after the retake on the wire and
		// before the request is written: it says what was done.
		require.Len(t, decisions, 2)
		assert.Equal(t, 1, decisions[1].Retaken)
		assert.Equal(t, Sent, decisions[1].Outcome)
		assert.GreaterOrEqual(t, decisions[1].Delay, time.Second+DefaultMargin-dial, "the new slot's wait")
		assert.False(t, reported[1].After(base.sent[1]))
		// The second slot was free at once, but the request reached the wire
		// 50ms after it: it took the next free slot, a window after the
		// first send (the old slot still counted while it reserved), and
		// gave the old one back.
		assert.GreaterOrEqual(t, base.sent[1].Sub(start), time.Second+DefaultMargin)
		assert.Equal(t, uint64(1), tr.Stats().Rules[0].Retakes)
		u := keyUsage(t, tr, "pg.example", "pg1")
		assert.Equal(t, 2, u.Entries, "the old slot given back")
	})
}

// TestRetakeOnTheWireRefused: when no new slot comes (a FailFast rule, the
// window full), a request late on the wire goes on its old slot, recorded,
// as it would have without the check: it is never sent unrecorded.
func TestRetakeOnTheWireRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		base := &wireBase{dial: []time.Duration{50 * time.Millisecond}}
		tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerSecond(1)}, FailFast: true}))
		require.NoError(t, err)
		sendPG(t, tr, 1)
		require.Len(t, base.sent, 1)
		assert.Zero(t, tr.Stats().Rules[0].Retakes)
		u := keyUsage(t, tr, "pg.example", "pg1")
		assert.Equal(t, 1, u.Entries, "sent on its old slot, still recorded")
		req, err := http.NewRequest(http.MethodGet, "https://pg.example/v1/charges", nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, ErrLimited, "the window is full")
	})
}

// TestUnreportedWireIsNotGuarded: a base that answers without reporting the
// connection (not net/http underneath) cannot be watched on the wire, so the
// transport stops counting on it, and a fresh process of it starts with the
// cautious initial allowance until it measures the wire.
func TestUnreportedWireIsNotGuarded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder(t, PerSecond(10)) // its base reports no connection
		assert.True(t, r.tr.eng.Guarded())
		r.send()
		assert.False(t, r.tr.eng.Guarded())
		// A fresh process of it starts with the cautious initial allowance:
		// TestLatenessUnguardedColdStart (internal/engine).
	})
}

// TestLateWakeRetakesTheSlot: a request that wakes later than its allowance
// (here 0 at first: synctest's clock measures no lateness) plus half the
// margin after its slot gives it back and takes the next free one, so that it
// is recorded when it is really sent; one that wakes within it keeps its slot.
func TestLateWakeRetakesTheSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		oversleep   []time.Duration // added to each sleep in turn
		wantRetaken int
	}{
		{"on time", nil, 0},
		{"late within half the margin", []time.Duration{DefaultMargin / 2}, 0},
		{"late beyond half the margin", []time.Duration{DefaultMargin/2 + time.Millisecond}, 1},
		{"late again and again", []time.Duration{time.Second, time.Second, time.Second, time.Second}, engine.MaxRetakes},
		{"very late, once", []time.Duration{time.Second + DefaultMargin/2 + time.Millisecond, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRecorder(t, PerSecond(1))
				tr, send := r.tr, r.send
				send() // at once: the log now holds one entry
				extra := tc.oversleep
				tr.eng.Sleep = func(ctx context.Context, d time.Duration) error {
					if len(extra) > 0 {
						d += extra[0]
						extra = extra[1:]
					}
					return engine.PreciseSleep(ctx, d)
				}
				send() // its slot is a window and a margin later; it wakes late
				tr.eng.Sleep = engine.PreciseSleep
				send() // on time
				sent, decisions := r.sent, r.decisions
				require.Len(t, sent, 3)
				assert.Equal(t, tc.wantRetaken, decisions[1].Retaken)
				assert.Equal(t, uint64(tc.wantRetaken), tr.Stats().Rules[0].Retakes)
				assert.GreaterOrEqual(t, sent[1].Sub(sent[0]), time.Second+DefaultMargin)
				if tc.wantRetaken < engine.MaxRetakes {
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
	Measured(r.tr)
	return r
}

// send sends one request and requires a response.
func (r *recorder) send() { sendPG(r.t, r.tr, 1) }

// sendPG sends n requests to pg.example through tr, one after another, and
// requires a response to each.
func sendPG(t *testing.T, tr *Transport, n int) {
	t.Helper()
	for range n {
		req, err := http.NewRequest(http.MethodGet, "https://pg.example/v1/charges", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newMemoryStore(t *testing.T) store.Store {
	st, err := store.NewMemory()
	require.NoError(t, err)
	return st
}

// writingBase is a base transport that reports the connection, writes the
// request (records the time) and reports the write, as net/http does.
type writingBase struct{ gotConn, sent []time.Time }

func (b *writingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{})
	}
	b.gotConn = append(b.gotConn, time.Now())
	b.sent = append(b.sent, time.Now())
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestHooksRunAfterTheWrite: the Decision hook (and logs, stats) run once
// the request is written, not between the lateness check on the connection
// and the write: a slow hook does not make the send late.
func TestHooksRunAfterTheWrite(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const slow = 20 * time.Millisecond
		base := &writingBase{}
		var decisions []Decision
		tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerSecond(100)}}),
			WithOnDecision(func(d Decision) { time.Sleep(slow); decisions = append(decisions, d) }))
		require.NoError(t, err)
		start := time.Now()
		sendPG(t, tr, 1)
		require.Len(t, base.sent, 1)
		assert.Equal(t, start, base.sent[0], "written as soon as it had its connection")
		require.Len(t, decisions, 1, "reported once, after the write")
		assert.Equal(t, Sent, decisions[0].Outcome)
	})
}

// slowWriteBase writes each request a delay after it got its connection,
// as a process does whose write waits for its scheduler.
type slowWriteBase struct {
	delay time.Duration
	sent  []time.Time
}

func (b *slowWriteBase) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{})
	}
	time.Sleep(b.delay)
	b.sent = append(b.sent, time.Now())
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestLateWriteRaisesTheAllowance: a request written 4ms after the check on
// its connection was sent 4ms late, and the process's allowance says so:
// later slots are recorded that much later, so that the upstream, which
// counts the write, sees no more than N in a window.
func TestLateWriteRaisesTheAllowance(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const delay = 4 * time.Millisecond
		base := &slowWriteBase{delay: delay}
		var decisions []Decision
		tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerSecond(100)}, NoDefaultPace: true}),
			WithOnDecision(func(d Decision) { decisions = append(decisions, d) }))
		require.NoError(t, err)
		sendPG(t, tr, 3)
		require.Len(t, decisions, 3)
		assert.Equal(t, delay, decisions[1].Allowance, "the write's lateness measured")
		assert.Equal(t, delay, decisions[2].Allowance)
	})
}

// handoffBase is a base transport whose request waits, after its
// connection, for the goroutine that writes it (handoff(i) for the i-th
// request), then writes its first header field (first: "Host" as net/http's
// HTTP/1 does, ":authority" as its HTTP/2), which is when it is sent.
type handoffBase struct {
	first   string
	handoff func(i int) time.Duration
	mu      sync.Mutex
	sent    []time.Time
}

func (b *handoffBase) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	b.mu.Lock()
	i := len(b.sent)
	b.sent = append(b.sent, time.Time{}) // its place; the time when written
	b.mu.Unlock()
	trace.GotConn(httptrace.GotConnInfo{})
	time.Sleep(b.handoff(i))
	trace.WroteHeaderField(b.first, []string{"pg.example"})
	b.mu.Lock()
	b.sent[i] = time.Now()
	b.mu.Unlock()
	trace.WroteRequest(httptrace.WroteRequestInfo{})
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestLateHandoffRetakesBeforeTheWrite: an HTTP/1 request that got its
// connection on time but waited 50ms for the goroutine that writes it is
// checked again as it is written, and takes a new slot there, so that the
// upstream never sees more than N in a window. Over HTTP/2, whose first
// header field is written under a lock the connection's streams share, it
// is not held, and its lateness raises the allowance of later slots.
func TestLateHandoffRetakesBeforeTheWrite(t *testing.T) {
	t.Parallel()
	const n, w, late = 2, time.Second, 50 * time.Millisecond
	for _, first := range []string{"Host", ":authority"} {
		t.Run(first, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &handoffBase{first: first, handoff: func(i int) time.Duration {
					if i == 1 {
						return late
					}
					return 0
				}}
				var decisions []Decision
				tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{Per(n, w)}, NoDefaultPace: true}),
					WithOnDecision(func(d Decision) { decisions = append(decisions, d) }))
				require.NoError(t, err)
				sendPG(t, tr, 4)
				require.Len(t, decisions, 4)
				sent := base.sent
				if first == "Host" {
					assert.Equal(t, 1, decisions[1].Retaken, "the late write took a new slot")
					for i := n; i < len(sent); i++ {
						assert.GreaterOrEqual(t, sent[i].Sub(sent[i-n]), w, "send %d", i)
					}
					return
				}
				assert.Zero(t, decisions[1].Retaken, "an HTTP/2 write is not held")
				assert.Greater(t, decisions[2].Allowance, DefaultMargin, "its lateness measured (capped at 4 × (allowance + margin) a sample)")
			})
		})
	}
}

// TestNetHTTPWritesHostFirst: the check as a request is written relies on
// net/http's HTTP/1 transport writing "Host" first and its HTTP/2 transport
// writing a pseudo-header field first.
func TestNetHTTPWritesHostFirst(t *testing.T) {
	t.Parallel()
	for _, h2 := range []bool{false, true} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		srv.EnableHTTP2 = h2
		srv.StartTLS()
		var first []string
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			WroteHeaderField: func(key string, _ []string) { first = append(first, key) },
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		srv.Close()
		require.NotEmpty(t, first)
		if h2 {
			assert.Equal(t, 2, resp.ProtoMajor)
			assert.Equal(t, ":authority", first[0])
		} else {
			assert.Equal(t, 1, resp.ProtoMajor)
			assert.Equal(t, "Host", first[0])
		}
	}
}

// pipeConn is the client's end of an in-memory connection that says when
// the first bytes of a request were written to it (flushed by net/http).
type pipeConn struct {
	net.Conn
	once  sync.Once
	wrote chan struct{}
}

func (c *pipeConn) Write(p []byte) (int, error) {
	c.once.Do(func() { close(c.wrote) })
	return c.Conn.Write(p)
}

// TestHookAfterTheFlushHTTP1: over net/http's HTTP/1 transport, whose
// WroteRequest comes before the request is flushed to its connection, the
// Decision hook does not hold the flush: the request's bytes leave while
// the hook runs (a hook that waits for them finds them).
func TestHookAfterTheFlushHTTP1(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var conns []*pipeConn
		var served sync.WaitGroup
		base := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			cli, srv := net.Pipe()
			c := &pipeConn{Conn: cli, wrote: make(chan struct{})}
			conns = append(conns, c)
			served.Go(func() {
				defer srv.Close()
				br := bufio.NewReader(srv)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					req.Body.Close()
					if _, err := io.WriteString(srv, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
						return
					}
				}
			})
			return c, nil
		}}
		var flushed []bool
		tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerSecond(100)}}),
			WithOnDecision(func(Decision) {
				select {
				case <-conns[len(conns)-1].wrote:
					flushed = append(flushed, true)
				case <-time.After(time.Second): // fake time: passes only if the flush waits for the hook
					flushed = append(flushed, false)
				}
			}))
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodGet, "http://pg.example/v1/charges", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, []bool{true}, flushed, "the hook ran before the request left")
		base.CloseIdleConnections()
		served.Wait()
	})
}

// uploadBase is a base transport that writes each request's header fields
// at once, as net/http's HTTP/2 transport does (":authority" first), then
// takes upload to send its body before it reports the request written.
type uploadBase struct{ upload time.Duration }

func (b *uploadBase) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	trace.GotConn(httptrace.GotConnInfo{})
	trace.WroteHeaderField(":authority", []string{"pg.example"})
	if trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	time.Sleep(b.upload)
	trace.WroteRequest(httptrace.WroteRequestInfo{})
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestUploadIsNoLateness: an HTTP/2 request whose headers went at once and
// whose body took 400ms to upload was not sent late: the upstream counts it
// when its headers arrive. The allowance of later reservations stays at
// what was measured then (none), not the upload's time.
func TestUploadIsNoLateness(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var decisions []Decision
		tr, err := New(&uploadBase{upload: 400 * time.Millisecond}, newMemoryStore(t),
			WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{PerSecond(100)}, NoDefaultPace: true}),
			WithOnDecision(func(d Decision) { decisions = append(decisions, d) }))
		require.NoError(t, err)
		sendPG(t, tr, 3)
		require.Len(t, decisions, 3)
		assert.Zero(t, decisions[1].Allowance, "the upload counted as lateness")
		assert.Zero(t, decisions[2].Allowance, "the upload counted as lateness")
	})
}

// redialBase is a base transport whose redial-th request meets a connection
// the server closed: its first write fails, and net/http writes it again on
// a new connection, dialed in dial, as its HTTP/1 transport does for an
// idempotent request.
type redialBase struct {
	redial int
	dial   time.Duration
	sent   []time.Time
}

func (b *redialBase) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	if len(b.sent) == b.redial {
		trace.GotConn(httptrace.GotConnInfo{Reused: true})
		trace.WroteHeaderField("Host", []string{"pg.example"})
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: io.ErrClosedPipe})
		time.Sleep(b.dial)
	}
	trace.GotConn(httptrace.GotConnInfo{})
	trace.WroteHeaderField("Host", []string{"pg.example"})
	b.sent = append(b.sent, time.Now())
	trace.WroteRequest(httptrace.WroteRequestInfo{})
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

// TestRewriteOnANewConnection: a request that net/http writes again on a
// new connection (the first one was closed by the server) is checked on
// that one too: the dial is lateness, and no window holds more than N.
func TestRewriteOnANewConnection(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n, w = 2, time.Second
		base := &redialBase{redial: 1, dial: 50 * time.Millisecond}
		var decisions []Decision
		tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{Per(n, w)}, NoDefaultPace: true}),
			WithOnDecision(func(d Decision) { decisions = append(decisions, d) }))
		require.NoError(t, err)
		sendPG(t, tr, 4)
		require.Len(t, decisions, 4, "one Decision a request")
		assert.Equal(t, 1, decisions[1].Retaken, "retaken on the new connection")
		for i := n; i < len(base.sent); i++ {
			assert.GreaterOrEqual(t, base.sent[i].Sub(base.sent[i-n]), w, "send %d", i)
		}
	})
}

// TestRewriteAfterAWriteOnANewConnection: net/http's HTTP/1 transport also
// writes an idempotent request again on a new connection when the one it
// reused was closed after the request was written, before any byte of the
// response. That write is checked too: the new connection's dial (50ms
// here) is lateness, and no window holds more than N of the requests the
// server read, the unanswered one included.
func TestRewriteAfterAWriteOnANewConnection(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const n, w, dial = 2, time.Second, 50 * time.Millisecond
		var mu sync.Mutex
		var read []time.Time // when the server read each request
		var conns int
		var served sync.WaitGroup
		base := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			mu.Lock()
			i := conns
			conns++
			mu.Unlock()
			if i > 0 {
				time.Sleep(dial)
			}
			cli, srv := net.Pipe()
			served.Go(func() {
				defer srv.Close()
				br := bufio.NewReader(srv)
				for k := 0; ; k++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					req.Body.Close()
					mu.Lock()
					read = append(read, time.Now())
					mu.Unlock()
					if i == 0 && k == 1 {
						return // the second request on the first connection: closed unanswered
					}
					if _, err := io.WriteString(srv, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
						return
					}
				}
			})
			return cli, nil
		}}
		var decisions []Decision
		tr, err := New(base, newMemoryStore(t), WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{Per(n, w)}, NoDefaultPace: true}),
			WithOnDecision(func(d Decision) { decisions = append(decisions, d) }))
		require.NoError(t, err)
		for range 4 {
			req, err := http.NewRequest(http.MethodGet, "http://pg.example/v1/charges", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
		}
		base.CloseIdleConnections()
		served.Wait()
		assert.Len(t, decisions, 4, "one Decision a request")
		assert.Equal(t, 2, conns, "the second request written again on a new connection")
		require.Len(t, read, 5)
		for i := n; i < len(read); i++ {
			assert.GreaterOrEqual(t, read[i].Sub(read[i-n]), w, "read %d", i)
		}
	})
}

// TestLateProcessTakesABackfillSlot: an interactive process that learned
// 8ms of lateness, more than the 5ms a yielding backfill slot is recorded
// with, still takes one: it is held to that slot's allowance (a wake-up or
// a write later than it retakes), instead of queuing behind the backfill.
// Every window holds at most N sends.
func TestLateProcessTakesABackfillSlot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newMemoryStore(t)
		var mu sync.Mutex
		var sent []time.Time
		base := roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Host == "api.example.com" {
				mu.Lock()
				sent = append(sent, time.Now())
				mu.Unlock()
			}
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
		})
		lanes := Rule{Name: "lanes", Host: "api.example.com", Limits: []Limit{Per(10, time.Second)}, Key: Fixed("gw"),
			NoDefaultPace: true, Lanes: 2, Lane: func(r *http.Request) int {
				if r.Header.Get("X-Lane") == "1" {
					return 1
				}
				return 0
			}}
		backfill, err := New(base, st, WithRule(lanes))
		require.NoError(t, err)
		backfill.eng.Sleep = func(ctx context.Context, d time.Duration) error { // 1ms late: its slots are recorded with 5ms
			return engine.PreciseSleep(ctx, d+time.Millisecond)
		}
		var decisions []Decision
		interactive, err := New(base, st, WithRule(lanes),
			WithRule(Rule{Name: "other", Host: "other.example.com", Limits: []Limit{PerSecond(100)}, Key: Fixed("o"), NoDefaultPace: true}),
			WithOnDecision(func(d Decision) {
				mu.Lock()
				decisions = append(decisions, d)
				mu.Unlock()
			}))
		require.NoError(t, err)
		Measured(interactive)
		const late = 8 * time.Millisecond
		wakes := 0
		interactive.eng.Sleep = func(ctx context.Context, d time.Duration) error {
			wakes++
			if wakes <= 2 { // its first requests, elsewhere, wake 8ms late
				d += late
			}
			return engine.PreciseSleep(ctx, d)
		}
		get := func(tr *Transport, url string, lane string) {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			require.NoError(t, err)
			if lane != "" {
				req.Header.Set("X-Lane", lane)
			}
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
		}
		get(interactive, "https://other.example.com/", "")
		get(interactive, "https://other.example.com/", "")
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { get(backfill, "https://api.example.com/x", "") })
		}
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		get(interactive, "https://api.example.com/x", "1")
		took := time.Since(start)
		wg.Wait()

		mu.Lock()
		defer mu.Unlock()
		d := decisions[len(decisions)-1]
		require.Greater(t, decisions[1].Allowance, contract.LaneAllowance, "the interactive process learned its lateness")
		assert.True(t, d.Took, "it took a backfill slot")
		assert.Equal(t, contract.LaneAllowance, d.Allowance, "held to the slot's allowance")
		assert.Less(t, took, 1500*time.Millisecond, "rather than queue behind the backfill")
		for i := range sent {
			n := 0
			for _, u := range sent {
				if !u.Before(sent[i]) && u.Before(sent[i].Add(time.Second)) {
					n++
				}
			}
			assert.LessOrEqual(t, n, 10)
		}
	})
}

// lateKey marks the context of a request whose wake-up oversleeps.
type lateKey struct{}

// TestTenantRetakeKeepsItsPlace: a light tenant's request that wakes late
// behind a backlog of a tenant of weight 5 gives its slot back and takes
// the next one after its wake-up, with its start tag: it keeps its place
// before the backlog's waiters, and is not charged a second time (which
// would put it behind five of them).
func TestTenantRetakeKeepsItsPlace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		sent := map[string][]time.Time{}
		var decisions []Decision
		tr, err := New(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			c := req.Header.Get("X-Customer")
			sent[c] = append(sent[c], time.Now())
			mu.Unlock()
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
		}), newMemoryStore(t),
			WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{Per(1, 100*time.Millisecond)},
				Tenant:  func(r *http.Request) (string, error) { return r.Header.Get("X-Customer"), nil },
				Weights: map[string]int{"heavy": 5}}),
			WithOnDecision(func(d Decision) {
				mu.Lock()
				decisions = append(decisions, d)
				mu.Unlock()
			}))
		require.NoError(t, err)
		Measured(tr)
		const oversleep = 30 * time.Millisecond // beyond the allowance plus half the margin
		tr.eng.Sleep = func(ctx context.Context, d time.Duration) error {
			if once, ok := ctx.Value(lateKey{}).(*sync.Once); ok {
				once.Do(func() { d += oversleep }) // its first wake-up only
			}
			return engine.PreciseSleep(ctx, d)
		}
		send := func(ctx context.Context, customer string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://pg.example/v1/charges", nil)
			require.NoError(t, err)
			req.Header.Set("X-Customer", customer)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
		}
		var wg sync.WaitGroup
		for range 30 {
			wg.Go(func() { send(context.Background(), "heavy") })
			synctest.Wait()
		}
		time.Sleep(350 * time.Millisecond)
		start := time.Now()
		send(context.WithValue(context.Background(), lateKey{}, new(sync.Once)), "light")
		took := time.Since(start)
		wg.Wait()
		var light Decision
		for _, d := range decisions {
			if d.Tenant == "light" {
				light = d
			}
		}
		require.Equal(t, 1, light.Retaken, "it woke late and took a slot again")
		// Slots 105ms apart (the window and the margin): its slot at
		// 420ms, its wake-up 30ms later, the next slot at 525ms.
		assert.Equal(t, 175*time.Millisecond, took, "the slot after its wake-up: not behind the backlog")
		assert.Len(t, sent["heavy"], 30)
	})
}

// TestYieldingSlotKeepsItsAllowance: a slot that yields to higher lanes is
// recorded with at least contract.LaneAllowance, more than this process's
// own allowance: a request that wakes later than its own allowance plus the
// retake threshold, but within the slot's, sends on it rather than taking
// another (and a late request that took one also sends within the slot's).
func TestYieldingSlotKeepsItsAllowance(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{t: t}
		tr, err := New(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			r.sent = append(r.sent, time.Now())
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
		}), newMemoryStore(t),
			WithRule(Rule{Host: "pg.example", Key: Fixed("pg1"), Limits: []Limit{Per(1, 100*time.Millisecond)},
				Lanes: 2, Lane: func(*http.Request) int { return 0 }}),
			WithOnDecision(func(d Decision) { r.decisions = append(r.decisions, d) }))
		require.NoError(t, err)
		Measured(tr)
		r.tr = tr
		const late = contract.LaneAllowance + time.Millisecond
		extra := []time.Duration{time.Millisecond, late}
		tr.eng.Sleep = func(ctx context.Context, d time.Duration) error {
			if len(extra) > 0 {
				d += extra[0]
				extra = extra[1:]
			}
			return engine.PreciseSleep(ctx, d)
		}
		r.send() // at once, 1ms late: its allowance is now 1ms
		r.send() // its slot yields (lane 0, 100ms away); it wakes 6ms late
		require.Len(t, r.decisions, 2)
		d := r.decisions[1]
		assert.Equal(t, contract.LaneAllowance, d.Allowance, "the yielding slot's")
		assert.Zero(t, d.Retaken, "within the slot's allowance plus half the margin")
	})
}
