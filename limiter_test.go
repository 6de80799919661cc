package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

// w is the window of the limiter tests; with the default margin, a full
// window frees its first slot w + DefaultMargin after it.
const w = time.Second

const slot = w + throttle.DefaultMargin

// newLimiter returns a limiter named "api" that has measured its lateness
// (see throttle.Measured): the tests of exact waits start there.
func newLimiter(t *testing.T, st store.Store, r throttle.Rule, opts ...throttle.Option) *throttle.Limiter {
	t.Helper()
	if st == nil {
		st = newMemory(t)
	}
	if r.Name == "" {
		r.Name = "api"
	}
	l, err := throttle.NewLimiter(st, r, opts...)
	require.NoError(t, err)
	return throttle.MeasuredLimiter(l)
}

func per(n int) []throttle.Limit { return []throttle.Limit{throttle.Per(n, w)} }

// TestLimiterWait checks Wait's waits to the microsecond, and its refusals:
// at once, when the slot is beyond MaxWait or the context's deadline, or in
// FailFast mode.
func TestLimiterWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		rule    throttle.Rule
		timeout time.Duration
		// wait is the 3rd Wait's; zero with refused.
		wait    time.Duration
		beyond  bool // refused by the deadline (LimitError.BeyondDeadline)
		overMax bool // refused by MaxWait (LimitError.BeyondMaxWait)
	}{
		{name: "waits for the slot", wait: slot},
		{name: "within the deadline", timeout: slot + time.Millisecond, wait: slot},
		{name: "beyond MaxWait", rule: throttle.Rule{MaxWait: slot - time.Microsecond}, overMax: true},
		{name: "beyond the deadline", timeout: slot - time.Millisecond, beyond: true},
		{name: "FailFast", rule: throttle.Rule{FailFast: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var decisions decisionLog
				tc.rule.Limits = per(2)
				l := newLimiter(t, nil, tc.rule, decisions.option())
				ctx := context.Background()
				for range 2 {
					assert.Zero(t, elapsed(func() { require.NoError(t, l.Wait(ctx, "k", 1)) }))
				}
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				var err error
				assert.Equal(t, tc.wait, elapsed(func() { err = l.Wait(ctx, "k", 1) }))
				d := decisions.last(t)
				if tc.wait > 0 {
					require.NoError(t, err)
					assert.Equal(t, throttle.Sent, d.Outcome)
					assert.Equal(t, tc.wait, d.Delay)
					assert.Equal(t, throttle.Per(2, w), d.Limit)
					return
				}
				var le *throttle.LimitError
				require.ErrorAs(t, err, &le)
				assert.ErrorIs(t, err, throttle.ErrLimited)
				assert.Equal(t, slot, le.RetryAfter)
				assert.Equal(t, tc.beyond, le.BeyondDeadline)
				assert.Equal(t, tc.overMax, le.BeyondMaxWait)
				assert.Equal(t, tc.overMax, strings.Contains(le.Error(), "beyond the rule's MaxWait"), le.Error())
				assert.Equal(t, "api", le.Rule)
				assert.Equal(t, throttle.Limited, d.Outcome)
				s := l.Stats().Rules[0]
				assert.Equal(t, uint64(2), s.Requests[throttle.Sent])
				assert.Equal(t, uint64(1), s.Requests[throttle.Limited])
			})
		})
	}
}

// TestLimiterWaitCanceled checks that a Wait whose context ends returns its
// error and gives the slot back.
func TestLimiterWaitCanceled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var decisions decisionLog
		l := newLimiter(t, nil, throttle.Rule{Limits: per(1)}, decisions.option())
		ctx := context.Background()
		require.NoError(t, l.Wait(ctx, "k", 1))
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		var err error
		assert.Equal(t, 100*time.Millisecond, elapsed(func() { err = l.Wait(cctx, "k", 1) }))
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, throttle.Canceled, decisions.last(t).Outcome)
		synctest.Wait() // the Cancel, in the background
		// The slot given back is the next one again.
		assert.Equal(t, slot-100*time.Millisecond, elapsed(func() { require.NoError(t, l.Wait(ctx, "k", 1)) }))

		canceled, stop := context.WithCancel(ctx)
		stop()
		require.ErrorIs(t, l.Wait(canceled, "k", 1), context.Canceled)
		ok, err := l.Allow(canceled, "k", 1)
		assert.False(t, ok)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// TestLimiterAllow checks that Allow admits only a free slot, and records
// nothing when it refuses.
func TestLimiterAllow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// MaxWait is Wait's and Reserve's, never Allow's.
		l := newLimiter(t, nil, throttle.Rule{Limits: per(2), MaxWait: time.Hour})
		ctx := context.Background()
		var got []bool
		for range 3 {
			ok, err := l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			got = append(got, ok)
		}
		assert.Equal(t, []bool{true, true, false}, got)
		ok, err := l.Allow(ctx, "other", 2)
		require.NoError(t, err)
		assert.True(t, ok, "another key has its own log")
		time.Sleep(slot)
		// The refusal was not recorded: the window holds 2 again.
		for range 2 {
			ok, err := l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			assert.True(t, ok)
		}
		s := l.Stats().Rules[0]
		assert.Equal(t, uint64(5), s.Requests[throttle.Sent])
		assert.Equal(t, uint64(1), s.Requests[throttle.Limited])
	})
}

// TestLimiterReserve checks a Reservation's Delay, Wait and Cancel.
func TestLimiterReserve(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var decisions decisionLog
		l := newLimiter(t, nil, throttle.Rule{Limits: per(1), MaxWait: 2 * w}, decisions.option())
		ctx := context.Background()

		r1, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		assert.Zero(t, r1.Delay())
		assert.Empty(t, decisions.all(), "no decision before Wait or Cancel")
		require.NoError(t, r1.Wait(ctx))
		require.NoError(t, r1.Wait(ctx), "a second Wait returns the first's result")

		r2, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, slot, r2.Delay())
		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, slot-300*time.Millisecond, r2.Delay())
		r2.Cancel()
		r2.Cancel() // does nothing
		assert.Zero(t, r2.Delay())
		require.Error(t, r2.Wait(ctx), "Wait after Cancel")

		// r2's slot was given back: r3 takes it.
		r3, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, slot-300*time.Millisecond, r3.Delay())
		assert.Equal(t, slot-300*time.Millisecond, elapsed(func() { require.NoError(t, r3.Wait(ctx)) }))
		r3.Cancel() // after Wait: the slot is used

		r4, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, slot, r4.Delay(), "r3's slot was not given back")
		_, err = l.Reserve(ctx, "k", 1)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le, "beyond MaxWait")
		assert.Equal(t, 2*slot, le.RetryAfter)
		assert.True(t, le.BeyondMaxWait)
		r4.Cancel()

		var outcomes []throttle.Outcome
		for _, d := range decisions.all() {
			outcomes = append(outcomes, d.Outcome)
		}
		assert.Equal(t, []throttle.Outcome{throttle.Sent, throttle.Canceled, throttle.Sent, throttle.Limited, throttle.Canceled}, outcomes)
	})
}

// TestReservationWaitCanceled checks that a Reservation's Wait gives its slot
// back when its context ends.
func TestReservationWaitCanceled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, nil, throttle.Rule{Limits: per(1)})
		ctx := context.Background()
		require.NoError(t, l.Wait(ctx, "k", 1))
		r, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, r.Wait(cctx), context.DeadlineExceeded)
		synctest.Wait()
		again, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, slot-100*time.Millisecond, again.Delay())
		again.Cancel()
	})
}

// TestReservationLateness checks that a Reservation waited for long after its
// slot is retaken, as a late wake-up in the Transport is, and that the
// lateness raises the allowance of later reservations.
func TestReservationLateness(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var decisions decisionLog
		l := newLimiter(t, nil, throttle.Rule{Limits: per(1)}, decisions.option())
		ctx := context.Background()
		r, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		time.Sleep(300 * time.Millisecond) // late for the slot
		require.NoError(t, r.Wait(ctx))
		d := decisions.last(t)
		assert.Equal(t, throttle.Sent, d.Outcome)
		assert.Equal(t, 1, d.Retaken, "the late slot was given back and the next taken")
		// The lateness (capped at 4 × (allowance + DefaultMargin)) is
		// the allowance of the retake and of the next reservations.
		assert.Equal(t, 4*throttle.DefaultMargin, d.Allowance)
		time.Sleep(slot)
		require.NoError(t, l.Wait(ctx, "k", 1))
		assert.Equal(t, 4*throttle.DefaultMargin, decisions.last(t).Allowance)
		assert.Equal(t, uint64(1), l.Stats().Rules[0].Retakes)
	})
}

// TestLimiterStoreFailure checks the store failure policy of each call.
func TestLimiterStoreFailure(t *testing.T) {
	t.Parallel()
	errDown := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	tests := []struct {
		name string
		opts []throttle.Option
		dial time.Duration
		// allowed: what Allow says (the store is down, for 2 per second).
		allowed []bool
		err     error // of Wait and Allow, but for FailLocal's refusal
		timeout bool  // the store gave no answer in time (StoreError.Timeout)
	}{
		{name: "FailClosed", allowed: []bool{false}, err: throttle.ErrStoreUnavailable},
		{name: "FailClosed after the store timeout", opts: []throttle.Option{throttle.WithStoreTimeout(50 * time.Millisecond)},
			dial: time.Hour, allowed: []bool{false}, err: throttle.ErrStoreUnavailable, timeout: true},
		{name: "FailOpen", opts: []throttle.Option{throttle.WithFailOpen()}, allowed: []bool{true, true, true}},
		{name: "FailLocal", opts: []throttle.Option{throttle.WithFailLocal(0.5)},
			allowed: []bool{true, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := fakestore.New()
				st.Fail(errDown, tc.dial)
				l := newLimiter(t, st, throttle.Rule{Limits: per(2)}, tc.opts...)
				ctx := context.Background()
				var got []bool
				for range tc.allowed {
					ok, err := l.Allow(ctx, "k", 1)
					if tc.err != nil {
						require.ErrorIs(t, err, tc.err)
						var se *throttle.StoreError
						require.ErrorAs(t, err, &se)
						assert.Equal(t, tc.timeout, se.Timeout)
					} else {
						require.NoError(t, err)
					}
					got = append(got, ok)
				}
				assert.Equal(t, tc.allowed, got)
				r, err := l.Reserve(ctx, "k2", 1)
				if tc.err != nil {
					require.ErrorIs(t, err, tc.err)
					assert.Nil(t, r)
					require.ErrorIs(t, l.Wait(ctx, "k2", 1), tc.err)
					return
				}
				require.NoError(t, err)
				assert.Zero(t, r.Delay())
				require.NoError(t, r.Wait(ctx))
				require.NoError(t, l.Wait(ctx, "k2", 1))
			})
		})
	}
}

// TestLimiterOneStoreCall checks that each Wait, Allow and Reserve makes one
// store call (with its wait included), and Pause none of Reserve.
func TestLimiterOneStoreCall(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := fakestore.New()
		l := newLimiter(t, st, throttle.Rule{Limits: per(2)})
		ctx := context.Background()
		calls := func() int { c, _ := st.Calls(); return len(c) }
		for i := range 3 { // the 3rd waits
			require.NoError(t, l.Wait(ctx, "k", 1))
			assert.Equal(t, i+1, calls())
		}
		_, err := l.Allow(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, 4, calls())
		r, err := l.Reserve(ctx, "k", 1)
		require.NoError(t, err)
		require.NoError(t, r.Wait(ctx))
		assert.Equal(t, 5, calls())
		require.NoError(t, l.Pause(ctx, "k", time.Second))
		assert.Equal(t, 5, calls())
	})
}

// TestLimiterSharesLogsWithTransport checks that a Limiter and a Transport's
// rule of the same name count against each other, keyed as the Transport
// keys: with a secret, or from a credential.
func TestLimiterSharesLogsWithTransport(t *testing.T) {
	t.Parallel()
	bearer, err := operator.CredentialKey("bearer", secret)
	require.NoError(t, err)
	tests := []struct {
		name string
		key  throttle.KeyFunc
		rate string // the Limiter's key
		opts []throttle.Option
	}{
		{name: "fixed", key: throttle.Fixed("gw"), rate: "gw"},
		{name: "with a key secret", key: throttle.Fixed("gw"), rate: "gw",
			opts: []throttle.Option{throttle.WithKeySecret([]byte("0123456789abcdef0123456789abcdef"))}},
		{name: "a credential", key: throttle.ByAuthorization(), rate: bearer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMemory(t)
				var sent sendLog
				tr := newTransport(t, sent.base(), m, append([]throttle.Option{throttle.WithRule(throttle.Rule{
					Name: "api", Host: "api.example.com", Limits: per(3), Key: tc.key, FailFast: true,
				})}, tc.opts...)...)
				var decisions decisionLog
				l := newLimiter(t, m, throttle.Rule{Limits: per(3)}, append(tc.opts, decisions.option())...)
				other := newLimiter(t, m, throttle.Rule{Name: "other", Limits: per(3)}, tc.opts...)
				ctx := context.Background()

				send(t, tr, testURL)
				send(t, tr, testURL)
				ok, err := l.Allow(ctx, tc.rate, 1)
				require.NoError(t, err)
				assert.True(t, ok, "the 3rd of 3")
				ok, err = l.Allow(ctx, tc.rate, 1)
				require.NoError(t, err)
				assert.False(t, ok, "the Transport's 2 count")
				req, _ := newRequest(t, ctx, http.MethodGet, testURL)
				_, err = tr.RoundTrip(req)
				require.ErrorIs(t, err, throttle.ErrLimited, "the Limiter's 1 counts")

				ok, err = other.Allow(ctx, tc.rate, 3)
				require.NoError(t, err)
				assert.True(t, ok, "a rule of another name has its own logs")
				d := decisions.last(t)
				if tc.opts != nil {
					assert.True(t, strings.HasPrefix(d.Key, "hmac:"), d.Key)
				}
				assert.NotContains(t, d.Key, secret)
			})
		})
	}
}

// TestLimiterPause checks that Pause holds a key for every process on the
// store, and is reported.
func TestLimiterPause(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var heard []throttle.Feedback
		m := newMemory(t)
		opt := throttle.WithOnFeedback(func(f throttle.Feedback) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, f)
		})
		l := newLimiter(t, m, throttle.Rule{Limits: per(10)}, opt)
		peer := newLimiter(t, m, throttle.Rule{Limits: per(10)}) // another process
		ctx := context.Background()

		require.NoError(t, l.Pause(ctx, "k", 2*time.Second))
		assert.Equal(t, 2*time.Second, elapsed(func() { require.NoError(t, peer.Wait(ctx, "k", 1)) }))
		require.NoError(t, l.Pause(ctx, "k0", 0))
		assert.Equal(t, slot, elapsed(func() { require.NoError(t, peer.Wait(ctx, "k0", 1)) }),
			"no delay given: one window of the shortest limit")
		require.NoError(t, l.Pause(ctx, "long", time.Minute))
		err := peer.Wait(ctx, "long", 1)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le, "beyond MaxServerWait")
		assert.True(t, le.Upstream)
		assert.Equal(t, time.Minute, le.RetryAfter)

		assert.Equal(t, uint64(3), l.Stats().Rules[0].Upstream.Pauses)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, heard, 3)
		assert.Equal(t, throttle.Feedback{Rule: "api", Key: "k0", Throttled: true, Pause: slot}, heard[1])

		require.True(t, isA[*throttle.KeyError](l.Pause(ctx, "", time.Second)))
	})
}

// TestLimiterPauseErrors checks Pause's errors: a store that keeps no pauses,
// one marked down.
func TestLimiterPauseErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plain := newLimiter(t, fakestore.New().WithoutFeedback(), throttle.Rule{Limits: per(1)})
	require.ErrorContains(t, plain.Pause(ctx, "k", time.Second), "keeps no pauses")

	st := fakestore.New()
	l := newLimiter(t, st, throttle.Rule{Limits: per(1)})
	st.Fail(errors.New("connection refused"), 0)
	_, err := l.Allow(ctx, "k", 1) // marks the store down
	require.ErrorIs(t, err, throttle.ErrStoreUnavailable)
	require.ErrorIs(t, l.Pause(ctx, "k", time.Second), throttle.ErrStoreUnavailable)
}

// TestLimiterBadCalls checks the errors of a bad key or cost: nothing is
// reserved, and the decision is Failed.
func TestLimiterBadCalls(t *testing.T) {
	t.Parallel()
	st := fakestore.New()
	var decisions decisionLog
	l := newLimiter(t, st, throttle.Rule{Limits: []throttle.Limit{throttle.PerSecond(10), throttle.PerMinute(5)}}, decisions.option())
	ctx := context.Background()
	for _, tc := range []struct {
		key  string
		cost int
		want func(error) bool
	}{
		{"", 1, isA[*throttle.KeyError]},
		{"k", 0, is(throttle.ErrInvalidCost)},
		{"k", 6, is(throttle.ErrInvalidCost)},
	} {
		err := l.Wait(ctx, tc.key, tc.cost)
		require.True(t, tc.want(err), "%v", err)
		_, err = l.Allow(ctx, tc.key, tc.cost)
		require.True(t, tc.want(err), "%v", err)
		r, err := l.Reserve(ctx, tc.key, tc.cost)
		require.True(t, tc.want(err), "%v", err)
		assert.Nil(t, r)
		assert.Equal(t, throttle.Failed, decisions.last(t).Outcome)
	}
	calls, _ := st.Calls()
	assert.Empty(t, calls)
	assert.Equal(t, uint64(9), l.Stats().Rules[0].Requests[throttle.Failed])
}

// TestNewLimiterConfig checks that what a Limiter cannot use is a
// *ConfigError, as is what a Transport's rule refuses.
func TestNewLimiterConfig(t *testing.T) {
	t.Parallel()
	ok := throttle.Rule{Name: "api", Limits: per(1)}
	with := func(f func(*throttle.Rule)) throttle.Rule { r := ok; f(&r); return r }
	tests := []struct {
		name string
		st   store.Store
		rule throttle.Rule
		opts []throttle.Option
		want string
	}{
		{name: "no name", rule: with(func(r *throttle.Rule) { r.Name = "" }), want: "needs a Name"},
		{name: "Host", rule: with(func(r *throttle.Rule) { r.Host = "api.example.com" }), want: "Host read HTTP requests"},
		{name: "Key and Cost", rule: with(func(r *throttle.Rule) {
			r.Key, r.Cost = throttle.ByHost(), func(*http.Request) int { return 1 }
		}), want: "Key, Cost read HTTP requests"},
		{name: "PathPrefix", rule: with(func(r *throttle.Rule) { r.PathPrefix = "/v1" }), want: "PathPrefix"},
		{name: "Method", rule: with(func(r *throttle.Rule) { r.Method = "GET" }), want: "Method"},
		{name: "Retries", rule: with(func(r *throttle.Rule) { r.Retries = 1 }), want: "Retries"},
		{name: "Also", rule: with(func(r *throttle.Rule) {
			r.Also = []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("app"), Limits: r.Limits}}
		}), want: "Also read HTTP requests"},
		{name: "a limit of a unit", rule: with(func(r *throttle.Rule) {
			r.Limits = append(r.Limits, throttle.PerMinute(40_000).Of("tokens"))
		}), want: `a limit of the unit "tokens" (Limit.Of) needs a Transport`},
		{name: "IgnoreUpstream", rule: with(func(r *throttle.Rule) { r.IgnoreUpstream = true }), want: "IgnoreUpstream"},
		{name: "no limits", rule: with(func(r *throttle.Rule) { r.Limits = nil }), want: "no Limits"},
		{name: "bad limit", rule: with(func(r *throttle.Rule) { r.Limits = []throttle.Limit{throttle.Per(0, w)} }), want: "N must be at least 1"},
		{name: "FailFast with MaxWait", rule: with(func(r *throttle.Rule) { r.FailFast, r.MaxWait = true, w }), want: "FailFast"},
		{name: "nil store", st: (*fakestore.Store)(nil), rule: ok, want: "nil store"},
		{name: "WithRule", rule: ok, opts: []throttle.Option{throttle.WithRule(throttle.Rule{Host: "a.example", Limits: per(1)})}, want: "WithRule"},
		{name: "WithDefault", rule: ok, opts: []throttle.Option{throttle.WithDefault(throttle.Rule{Limits: per(1)})}, want: "WithDefault"},
		{name: "WithUnmatchedSent", rule: ok, opts: []throttle.Option{throttle.WithUnmatchedSent(false)}, want: "WithUnmatchedSent"},
		{name: "WithFailOpen and WithFailLocal", rule: ok, opts: []throttle.Option{throttle.WithFailOpen(), throttle.WithFailLocal(0.5)}, want: "WithFailOpen and WithFailLocal"},
		{name: "nil option", rule: ok, opts: []throttle.Option{nil}, want: "nil option"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := tc.st
			if st == nil {
				st = newMemory(t)
			}
			l, err := throttle.NewLimiter(st, tc.rule, tc.opts...)
			assert.Nil(t, l)
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
