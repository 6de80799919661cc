package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// concurrent is a fake upstream that counts the requests in flight: from
// the send until the response body is closed.
type concurrent struct {
	now, most atomic.Int32
	sends     atomic.Int32
	fail      atomic.Bool // answer with an error instead
}

func (c *concurrent) base() http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		c.sends.Add(1)
		if c.fail.Load() {
			return nil, errors.New("connection refused")
		}
		n := c.now.Add(1)
		for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
		}
		resp := okResponse(r)
		resp.Body = &countedBody{Reader: strings.NewReader("ok"), c: c}
		return resp, nil
	})
}

// countedBody is out of flight once read to its end or closed: the lease
// is given back then too, and a waiting request may be sent before this one's
// Close.
type countedBody struct {
	io.Reader
	c    *concurrent
	once sync.Once
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		b.once.Do(func() { b.c.now.Add(-1) })
	}
	return n, err
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.c.now.Add(-1) })
	return nil
}

func inFlightRule(n int, failFast bool, maxWait time.Duration) throttle.Option {
	return throttle.WithRule(throttle.Rule{
		Name: "gw", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(1000, time.Second)},
		Key: throttle.Fixed("gw"), FailFast: failFast, MaxWait: maxWait, Margin: throttle.NoMargin,
		InFlight: n, LeaseFor: time.Second,
		NoDefaultPace: true, // the cap alone holds requests back
	})
}

// TestInFlightCap: ten requests at once, each holding its response for a
// while, under a cap of three: never more than three in flight, all sent.
func TestInFlightCap(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var up concurrent
		var decisions decisionLog
		tr := newTransport(t, up.base(), newMemory(t), inFlightRule(3, false, time.Minute), decisions.option())
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
				resp, err := tr.RoundTrip(req)
				if !assert.NoError(t, err) {
					return
				}
				time.Sleep(5 * time.Second) // longer than LeaseFor: renewed meanwhile
				_, _ = io.Copy(io.Discard, resp.Body)
				assert.NoError(t, resp.Body.Close())
			})
		}
		wg.Wait()
		assert.Equal(t, int32(3), up.most.Load(), "the cap, and no more")
		assert.Equal(t, int32(10), up.sends.Load())
		st := tr.Stats().Rules[0].InFlight
		assert.Equal(t, int64(0), st.Held, "every lease given back")
		assert.Equal(t, uint64(7), st.Queued)
		assert.Zero(t, st.Lost)
		var queued int
		for _, d := range decisions.all() {
			if d.InFlight {
				queued++
				assert.Positive(t, d.Queued)
				assert.GreaterOrEqual(t, d.Delay, d.Queued)
			}
		}
		assert.Equal(t, 7, queued)
	})
}

// TestInFlightRefused: a FailFast request finds no lease free and is refused
// at once with a *LimitError saying so; the lease comes back when the body
// of the first response is closed.
func TestInFlightRefused(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var up concurrent
		var decisions decisionLog
		tr := newTransport(t, up.base(), newMemory(t), inFlightRule(1, true, 0), decisions.option())
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		first, err := tr.RoundTrip(req)
		require.NoError(t, err)

		req, body := newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err = tr.RoundTrip(req)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.True(t, le.InFlight)
		assert.ErrorIs(t, err, throttle.ErrLimited)
		assert.Contains(t, err.Error(), "1 of 1 requests in flight (responses whose bodies are not yet closed)")
		assert.Equal(t, time.Millisecond, le.RetryAfter, "the lease was taken just now: not the whole LeaseFor")
		assert.Equal(t, int32(1), body.closes.Load())
		d := decisions.last(t)
		assert.Equal(t, throttle.Limited, d.Outcome)
		assert.True(t, d.InFlight)
		assert.Equal(t, uint64(1), tr.Stats().Rules[0].InFlight.Refused)

		time.Sleep(300 * time.Millisecond)
		req, _ = newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err = tr.RoundTrip(req)
		require.ErrorAs(t, err, &le)
		assert.Equal(t, 300*time.Millisecond, le.RetryAfter, "as long again as the lease has been held")

		require.NoError(t, first.Body.Close())
		send(t, tr, testURL)
	})
}

// TestInFlightUnclosedBody: a response body never closed holds its lease
// for ten LeaseFor at most (renewed meanwhile); then the lease is given
// back, counted, and a warning names the rule and the body not closed. A
// Close after it gives back nothing more.
func TestInFlightUnclosedBody(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var up concurrent
		var logs logRecorder
		tr := newTransport(t, up.base(), newMemory(t), inFlightRule(1, true, 0), logs.option())
		st := func() throttle.RuleStats { return tr.Stats().Rules[0] }
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		leaked, err := tr.RoundTrip(req)
		require.NoError(t, err)

		time.Sleep(9900 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, int64(1), st().InFlight.Held, "held (renewed) for up to ten LeaseFor")
		req, _ = newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err = tr.RoundTrip(req)
		require.ErrorIs(t, err, throttle.ErrLimited)
		logs.take()

		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, int64(0), st().InFlight.Held)
		assert.Equal(t, uint64(1), st().InFlight.Reclaimed)
		assert.Zero(t, st().InFlight.Lost)
		lines := logs.take()
		require.Len(t, lines, 1)
		assert.Contains(t, lines[0], "WARN")
		assert.Contains(t, lines[0], `rule "gw"`)
		assert.Contains(t, lines[0], "response body was not closed")

		req, _ = newRequest(t, context.Background(), http.MethodGet, testURL)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, "the lease came back")
		require.NoError(t, leaked.Body.Close())
		assert.Equal(t, int64(1), st().InFlight.Held, "the late Close gives back nothing more")
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, int64(0), st().InFlight.Held)
	})
}

// TestInFlightLongWaitKeepsItsLease: the longest hold counts from the
// response: a request that holds its lease while it waits a minute for its
// slot (sixty LeaseFor) is sent with it.
func TestInFlightLongWaitKeepsItsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var up concurrent
		tr := newTransport(t, up.base(), newMemory(t), throttle.WithRule(throttle.Rule{
			Name: "slow", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerMinute(1)},
			Key: throttle.Fixed("slow"), MaxWait: 2 * time.Minute, Margin: throttle.NoMargin,
			InFlight: 2, LeaseFor: time.Second, NoDefaultPace: true,
		}))
		for range 2 {
			req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
		}
		st := tr.Stats().Rules[0]
		assert.Zero(t, st.InFlight.Reclaimed)
		assert.Equal(t, int64(0), st.InFlight.Held)
		assert.Equal(t, uint64(2), st.Requests[throttle.Sent])
		assert.Positive(t, st.Wait.Sum, "the second waited for its slot")
	})
}

// TestInFlightRelease: the lease goes back on every path: a response read to
// its end, a response without a body, an error from the base transport, a
// context that ends while the request waits in the queue.
func TestInFlightRelease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var up concurrent
		tr := newTransport(t, up.base(), newMemory(t), inFlightRule(1, true, 0))
		held := func() int64 { return tr.Stats().Rules[0].InFlight.Held }

		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, int64(1), held())
		_, _ = io.ReadAll(resp.Body)
		assert.Equal(t, int64(0), held(), "read to its end")

		up.fail.Store(true)
		req, _ = newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err = tr.RoundTrip(req)
		require.Error(t, err)
		assert.Equal(t, int64(0), held(), "an error from the base")
		up.fail.Store(false)

		bare := newTransport(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil }),
			newMemory(t), inFlightRule(1, true, 0))
		for range 3 {
			send(t, bare, testURL) // http.NoBody: released at once
		}
	})
}

// TestInFlightWaitEnds: a request waits in the queue at most MaxWait, then
// is refused; one whose context ends first returns its error; both leave
// the queue, so the lease goes to the next request.
func TestInFlightWaitEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var up concurrent
		var decisions decisionLog
		tr := newTransport(t, up.base(), newMemory(t), inFlightRule(1, false, 3*time.Second), decisions.option())
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		first, err := tr.RoundTrip(req)
		require.NoError(t, err)

		req, _ = newRequest(t, context.Background(), http.MethodGet, testURL)
		var le *throttle.LimitError
		took := elapsed(func() { _, err = tr.RoundTrip(req) })
		require.ErrorAs(t, err, &le)
		assert.True(t, le.InFlight)
		assert.Equal(t, 3*time.Second, took, "MaxWait in the queue (the first lease renewed meanwhile)")
		assert.Equal(t, 3*time.Second, decisions.last(t).Queued)

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ = newRequest(t, ctx, http.MethodGet, testURL)
		_, err = tr.RoundTrip(req)
		require.Error(t, err)
		assert.True(t, errors.Is(err, context.DeadlineExceeded) || errors.As(err, &le), "%v", err)

		require.NoError(t, first.Body.Close())
		req, _ = newRequest(t, context.Background(), http.MethodGet, testURL)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, "no waiter left in the queue")
		assert.Zero(t, elapsed(func() { require.NoError(t, resp.Body.Close()) }))
		assert.Equal(t, int64(0), tr.Stats().Rules[0].InFlight.Held)
	})
}

// TestInFlightConfig: invalid in-flight settings fail at New.
func TestInFlightConfig(t *testing.T) {
	t.Parallel()
	rule := func(n int, lease time.Duration) throttle.Option {
		return throttle.WithRule(throttle.Rule{Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(1)}, InFlight: n, LeaseFor: lease})
	}
	for name, c := range map[string]struct {
		opt   throttle.Option
		store store.Store
	}{
		"negative InFlight":      {rule(-1, 0), nil},
		"LeaseFor alone":         {rule(0, time.Second), nil},
		"LeaseFor too short":     {rule(1, time.Millisecond), nil},
		"LeaseFor too long":      {rule(1, 25*time.Hour), nil},
		"a store without leases": {rule(1, 0), fakestore.New()},
	} {
		t.Run(name, func(t *testing.T) {
			st := c.store
			if st == nil {
				st = newMemory(t)
			}
			_, err := throttle.New(nil, st, c.opt)
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
		})
	}
	_, err := throttle.New(nil, newMemory(t), rule(2, 0))
	require.NoError(t, err, "LeaseFor defaults")
}

// A Limiter, which sees no response, cannot cap uses in flight.
func TestInFlightRefusedWithLimiter(t *testing.T) {
	t.Parallel()
	_, err := throttle.NewLimiter(newMemory(t), throttle.Rule{Name: "jobs", Limits: []throttle.Limit{throttle.PerSecond(10)}, InFlight: 2})
	var ce *throttle.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, ce.Reason, "a Limiter does not cap uses in flight")
}

// TestInFlightWithAlso: GitHub's shape, a cap in flight per token beside an
// app-wide limit (Also). The cap is on each token; the app's limit counts
// every token's sends; on the memory store and on a real Redis.
func TestInFlightWithAlso(t *testing.T) {
	t.Parallel()
	rule := throttle.Rule{
		Name: "github", Host: "api.example.com", Key: throttle.ByQuery("access_token"),
		Limits: []throttle.Limit{throttle.PerHour(5000)}, FailFast: true, Margin: throttle.NoMargin, NoDefaultPace: true,
		InFlight: 2,
		Also:     []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("my-app"), Limits: []throttle.Limit{throttle.PerHour(4)}, HashTag: true}},
	}
	run := func(t *testing.T, st store.Store) {
		var up concurrent
		tr := newTransport(t, up.base(), st, throttle.WithRule(rule))
		get := func(token string) (*http.Response, error) {
			req, err := http.NewRequest(http.MethodGet, "https://api.example.com/x?access_token="+token, nil)
			require.NoError(t, err)
			return tr.RoundTrip(req)
		}
		a1, err := get("a")
		require.NoError(t, err)
		a2, err := get("a")
		require.NoError(t, err)
		var le *throttle.LimitError
		_, err = get("a")
		require.ErrorAs(t, err, &le)
		assert.True(t, le.InFlight, "token a's cap: %v", err)
		b1, err := get("b")
		require.NoError(t, err, "token b has its own cap")
		require.NoError(t, a1.Body.Close())
		a3, err := get("a")
		require.NoError(t, err, "a's lease came back; the app's fourth")
		_, err = get("b")
		require.ErrorAs(t, err, &le)
		assert.False(t, le.InFlight)
		assert.Equal(t, "my-app", le.Key, "the app's limit counts every token: %v", err)
		for _, r := range []*http.Response{a2, a3, b1} {
			require.NoError(t, r.Body.Close())
		}
		assert.Equal(t, int32(4), up.sends.Load())
		assert.Equal(t, int32(3), up.most.Load(), "two of a's and one of b's at once")
		assert.Equal(t, int64(0), tr.Stats().Rules[0].InFlight.Held)
	}
	t.Run("memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { run(t, newMemory(t)) })
	})
	t.Run("redis", func(t *testing.T) {
		st, err := store.NewRedis(redistest.Shared(t).Client(t), store.WithPrefix(fmt.Sprintf("inflight-also-%d:", time.Now().UnixNano())))
		require.NoError(t, err)
		run(t, st)
	})
}

// A rule with InFlight and no LeaseFor takes DefaultLeaseFor (it was left at
// zero, and every request refused by the store, before).
func TestInFlightDefaultLeaseFor(t *testing.T) {
	t.Parallel()
	st := newMemory(t)
	base := roundTripperFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}, nil
	})
	tr, err := throttle.New(base, st, throttle.WithDefault(throttle.Rule{Name: "capped",
		Limits: []throttle.Limit{throttle.PerSecond(100)}, FailFast: true, InFlight: 5}))
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, "http://api.example.com/", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, uint64(1), tr.Stats().Rules[0].Requests[throttle.Sent])
}

// downOnDemand is a store with leases whose Reserve fails while down is set.
type downOnDemand struct {
	store.Store
	down atomic.Bool
}

func (s *downOnDemand) Reserve(ctx context.Context, key string, req contract.Request) (contract.Reservation, error) {
	if s.down.Load() {
		return contract.Reservation{}, errors.New("connection refused")
	}
	return s.Store.Reserve(ctx, key, req)
}

// TestInFlightRetakeOnTheWireKeepsItsLease: a request late on the wire
// retakes its slot; the shared store fails then, and under FailLocal the
// local limiter grants a slot with a lease of its own (the shared one given
// back). When that retake ends unsent (here its context ends while it waits
// for the new slot), the request goes on its old slot with the local lease:
// closing its body gives it back, and the local cap is free for the next
// request. (It used to go on with the shared lease, already given back,
// while the local one stayed held for good.)
func TestInFlightRetakeOnTheWireKeepsItsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := &downOnDemand{Store: newMemory(t)}
		var sends atomic.Int32
		base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if sends.Add(1) == 1 {
				time.Sleep(50 * time.Millisecond) // a slow dial: late on the wire
				st.down.Store(true)
			}
			if trace := httptrace.ContextClientTrace(r.Context()); trace != nil && trace.GotConn != nil {
				trace.GotConn(httptrace.GotConnInfo{})
			}
			resp := okResponse(r)
			resp.Body = io.NopCloser(strings.NewReader("ok"))
			return resp, nil
		})
		var decisions decisionLog
		tr := newTransport(t, base, st, throttle.WithRule(throttle.Rule{
			Name: "gw", Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(2, time.Second)},
			Key: throttle.Fixed("gw"), MaxWait: 5 * time.Second, InFlight: 2, LeaseFor: time.Second, NoDefaultPace: true,
		}), throttle.WithFailLocal(0.5), decisions.option())
		held := func() int64 { return tr.Stats().Rules[0].InFlight.Held }

		// The local share (1 a second) counts the shared send, so the
		// retake's local slot is a second away; the context ends first.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(200*time.Millisecond, cancel)
		req, _ := newRequest(t, ctx, http.MethodGet, testURL)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, "sent on its old slot")
		assert.Equal(t, int64(1), held(), "in flight until its body is closed")
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, int64(0), held(), "its lease given back with its body")

		// The store still down, the next request takes the local cap's
		// only lease at once.
		time.Sleep(2 * time.Second)
		req, _ = newRequest(t, context.Background(), http.MethodGet, testURL)
		resp, err = tr.RoundTrip(req)
		require.NoError(t, err)
		d := decisions.last(t)
		assert.True(t, d.Local)
		assert.False(t, d.InFlight, "no wait for a lease")
		assert.Zero(t, d.Queued)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, int64(0), held())
	})
}
