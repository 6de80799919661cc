package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// tokens is a request of one unit of its own key (2 per second: at most
// the two first) and cost tokens of a unit under limits.
func tokens(cost int, maxWait time.Duration, limits ...contract.Limit) contract.Request {
	r := req(1, maxWait, lim(1000, time.Second))
	r.Also = []contract.Part{{Unit: "tokens", Cost: cost, Limits: limits}}
	return r
}

func settle(t *testing.T, s store.Store, res contract.Reservation, actual ...int64) {
	t.Helper()
	require.NoError(t, s.Settle(ctx, res, actual))
}

// TestConformanceUnits runs the cases of a cost per limit (Part.Unit) and
// its settlement on every store.
func TestConformanceUnits(t *testing.T) { runCases(t, unitCases) }

var unitCases = []conformanceCase{
	{"a unit counts weighted entries: one request of 40 against 100 per second", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(100, time.Second)
		require.True(t, reserve(t, s, key, tokens(40, 0, l)).Allowed)
		clock.Advance(100 * time.Millisecond)
		require.True(t, reserve(t, s, key, tokens(40, 0, l)).Allowed)
		clock.Advance(100 * time.Millisecond)
		res := reserve(t, s, key, tokens(40, 0, l))
		require.False(t, res.Allowed, "80 + 40 > 100")
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 1, res.Part)
		assert.Equal(t, 0, res.Limit)
		assert.Equal(t, 800*time.Millisecond, res.RetryAfter, "the first leaves the window")
		res = reserve(t, s, key, tokens(20, 0, l))
		assert.True(t, res.Allowed, "80 + 20 fits")
		res = reserve(t, s, key, tokens(0, 0, l))
		assert.True(t, res.Allowed, "a cost of 0 always fits")
		res = reserve(t, s, key, tokens(1, time.Hour, l))
		require.True(t, res.Allowed)
		assert.Equal(t, 800*time.Millisecond, res.Delay)
	}},
	{"a refund gives back units, an overrun moves the next slot", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(100, time.Second)
		first := reserve(t, s, key, tokens(60, 0, l))
		require.True(t, first.Allowed)
		require.Len(t, first.Units, 1)
		assert.Equal(t, contract.Unit{Name: "tokens", Cost: 60}, first.Units[0])
		clock.Advance(100 * time.Millisecond)
		require.False(t, reserve(t, s, key, tokens(60, 0, l)).Allowed)
		settle(t, s, first, 10)
		second := reserve(t, s, key, tokens(60, 0, l))
		require.True(t, second.Allowed, "10 + 60 fits after the refund")
		clock.Advance(100 * time.Millisecond)
		require.True(t, reserve(t, s, key, tokens(30, 0, l)).Allowed, "10 + 60 + 30")
		// The second charged 90, not 60: 90 + 30 leave no unit free
		// until the second leaves the window, at 100ms + 1s.
		settle(t, s, second, 90)
		res := reserve(t, s, key, tokens(1, time.Hour, l))
		require.True(t, res.Allowed)
		assert.Equal(t, 900*time.Millisecond, res.Delay)
	}},
	{"a settlement of an entry that left the log changes nothing", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(100, time.Second)
		first := reserve(t, s, key, tokens(50, 0, l))
		clock.Advance(2 * time.Second)
		for range 20 {
			require.True(t, reserve(t, s, key, tokens(1, 0, l)).Allowed)
		}
		settle(t, s, first, 100)
		assert.True(t, reserve(t, s, key, tokens(79, 0, l)).Allowed)
	}},
	{"cancel gives a unit's cost back", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(100, time.Second)
		res := reserve(t, s, key, tokens(70, 0, l))
		require.True(t, res.Allowed)
		require.False(t, reserve(t, s, key, tokens(70, 0, l)).Allowed)
		require.NoError(t, s.Cancel(ctx, res))
		assert.True(t, reserve(t, s, key, tokens(70, 0, l)).Allowed)
	}},
	{"a paced unit is a token bucket of the unit; its settlement moves the time", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		// 100 tokens per second, a bucket of 100: one token every 10ms.
		p := contract.Limit{N: 100, Per: time.Second, Paced: true, Burst: 99}
		first := reserve(t, s, key, tokens(60, 0, p))
		require.True(t, first.Allowed)
		assert.Equal(t, int64(10_000), first.Units[0].Spacing)
		res := reserve(t, s, key, tokens(60, 0, p))
		require.False(t, res.Allowed, "60 + 60 > the bucket")
		assert.Equal(t, 200*time.Millisecond, res.RetryAfter)
		assert.Equal(t, 1, res.Part)
		// The newest entry: its refund gives the time back.
		settle(t, s, first, 10)
		second := reserve(t, s, key, tokens(60, 0, p))
		require.True(t, second.Allowed, "10 + 60 fits")
		third := reserve(t, s, key, tokens(20, 0, p))
		require.True(t, third.Allowed, "10 + 60 + 20 fits")
		// Not the newest any more: its refund stays spent, its overrun counts.
		settle(t, s, second, 0)
		require.False(t, reserve(t, s, key, tokens(20, 0, p)).Allowed, "no refund behind a later reservation")
		settle(t, s, third, 50)
		res = reserve(t, s, key, tokens(1, time.Hour, p))
		require.True(t, res.Allowed)
		// TAT: 10 + 60 + 20 + 30 units = 1.2s; a cost of 1 goes at TAT - 99 units.
		assert.Equal(t, 210*time.Millisecond, res.Delay)
	}},
	{"the unit's log holds one entry per request, whatever the cost", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		l := lim(2_000_000, time.Minute)
		for range 10 {
			require.True(t, reserve(t, s, key, tokens(150_000, 0, l)).Allowed)
		}
		assert.False(t, reserve(t, s, key, tokens(500_001, 0, l)).Allowed)
		assert.True(t, reserve(t, s, key, tokens(500_000, 0, l)).Allowed)
	}},
	{"a cost above a unit's N is an invalid request", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		_, err := s.Reserve(ctx, key, tokens(101, 0, lim(100, time.Second)))
		assert.ErrorIs(t, err, contract.ErrInvalidRequest)
		res := reserve(t, s, key, tokens(10, 0, lim(100, time.Second)))
		err = s.Settle(ctx, res, []int64{-1})
		assert.True(t, errors.Is(err, contract.ErrInvalidRequest))
		err = s.Settle(ctx, res, nil)
		assert.True(t, errors.Is(err, contract.ErrInvalidRequest))
	}},
}

// appTokens is a request of one unit under token's own limit (1000 per
// second) and, under app, the request (1000 per second) and cost tokens
// of a unit counted there: 100 per second.
func appTokens(token, app string, cost int, maxWait time.Duration) contract.Request {
	r := req(1, maxWait, lim(1000, time.Second))
	r.Also = []contract.Part{
		{Key: app, Limits: []contract.Limit{lim(1000, time.Second)}},
		{Key: app, Unit: "tokens", Cost: cost, Limits: []contract.Limit{lim(100, time.Second)}},
	}
	return r
}

// TestConformanceAlsoUnits runs the cases of a unit counted under another
// key of the request (Part.Key with Part.Unit) on every store, with the
// keys under one hash tag and under a tag each (on the Cluster, the app's
// key in a slot of its own, reserved by a call of its own).
func TestConformanceAlsoUnits(t *testing.T) {
	for _, layout := range []struct {
		name string
		keys func(key string, names ...string) []string
	}{{"one tag", tagged}, {"a tag each", spread}} {
		t.Run(layout.name, func(t *testing.T) {
			cases := make([]conformanceCase, len(alsoUnitCases))
			for i, c := range alsoUnitCases {
				cases[i] = conformanceCase{c.name, func(t *testing.T, s store.Store, clock *fakeClock, key string) {
					c.run(t, s, clock, layout.keys(key, "a", "b", "app"))
				}}
			}
			runCases(t, cases)
		})
	}
}

var alsoUnitCases = []struct {
	name string
	run  func(t *testing.T, s store.Store, clock *fakeClock, k []string)
}{
	{"the app's unit is shared by every token: its limit holds across them", func(t *testing.T, s store.Store, clock *fakeClock, k []string) {
		a, b, app := k[0], k[1], k[2]
		first := reserve(t, s, a, appTokens(a, app, 60, 0))
		require.True(t, first.Allowed)
		require.Len(t, first.Units, 1)
		assert.Equal(t, contract.Unit{Name: "tokens", Key: app, Cost: 60}, first.Units[0])
		clock.Advance(100 * time.Millisecond)
		res := reserve(t, s, b, appTokens(b, app, 60, 0))
		require.False(t, res.Allowed, "60 + 60 > 100 under the app, though b's own log is empty")
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 2, res.Part, "the app's unit")
		assert.Equal(t, 0, res.Limit)
		assert.Equal(t, 900*time.Millisecond, res.RetryAfter, "a's entry leaves the window")
		require.True(t, reserve(t, s, b, appTokens(b, app, 40, 0)).Allowed, "60 + 40 fits")
		require.False(t, reserve(t, s, a, appTokens(a, app, 1, 0)).Allowed, "the app's 100 are spent")
		res = reserve(t, s, a, appTokens(a, app, 50, time.Hour))
		require.True(t, res.Allowed)
		assert.Equal(t, 900*time.Millisecond, res.Delay, "after the first 60 left: 40 + 50")
	}},
	{"settle and cancel reach the app's unit", func(t *testing.T, s store.Store, clock *fakeClock, k []string) {
		a, b, app := k[0], k[1], k[2]
		first := reserve(t, s, a, appTokens(a, app, 60, 0))
		require.True(t, first.Allowed)
		require.False(t, reserve(t, s, b, appTokens(b, app, 60, 0)).Allowed)
		settle(t, s, first, 10)
		second := reserve(t, s, b, appTokens(b, app, 60, 0))
		require.True(t, second.Allowed, "10 + 60 after the refund")
		require.False(t, reserve(t, s, b, appTokens(b, app, 31, 0)).Allowed)
		require.NoError(t, s.Cancel(ctx, second))
		assert.True(t, reserve(t, s, a, appTokens(a, app, 90, 0)).Allowed, "10 + 90 after the cancel")
		// An overrun counts from the settlement on.
		clock.Advance(2 * time.Second)
		third := reserve(t, s, a, appTokens(a, app, 10, 0))
		require.True(t, third.Allowed)
		settle(t, s, third, 100)
		res := reserve(t, s, b, appTokens(b, app, 1, time.Hour))
		require.True(t, res.Allowed)
		assert.Equal(t, time.Second, res.Delay, "the 100 charged fill the app's window")
	}},
	{"the own key sets a later slot: the app's unit counts the request then", func(t *testing.T, s store.Store, clock *fakeClock, k []string) {
		// Token a's own limit of 1 per second is spent: its request goes at
		// 1s, and the app must count its 60 tokens at 1s, not now, so b's 60
		// wait for 2s. On the Cluster with a tag each, the app's entry is
		// reserved first and moved to the own slot.
		a, b, app := k[0], k[1], k[2]
		own := func(tok string, cost int) contract.Request {
			r := appTokens(tok, app, cost, time.Hour)
			r.Limits = []contract.Limit{lim(1, time.Second)}
			return r
		}
		require.True(t, reserve(t, s, a, req(1, 0, lim(1, time.Second))).Allowed)
		first := reserve(t, s, a, own(a, 60))
		require.True(t, first.Allowed)
		assert.Equal(t, time.Second, first.Delay)
		assert.Equal(t, 0, first.Part, "token a's own limit")
		second := reserve(t, s, b, own(b, 60))
		require.True(t, second.Allowed)
		assert.Equal(t, 2*time.Second, second.Delay, "the app counts a's 60 at 1s")
		assert.Equal(t, contract.CauseLimit, second.Cause)
		assert.Equal(t, 2, second.Part)
		require.NoError(t, s.Cancel(ctx, second))
		require.NoError(t, s.Cancel(ctx, first))
		res := reserve(t, s, b, own(b, 100))
		require.True(t, res.Allowed)
		// A cancelled unit entry keeps its time at weight 0 (the order of
		// the log), not its 60 tokens, which would hold 100 back to 3s.
		assert.Equal(t, 2*time.Second, res.Delay, "both cancels reached the app's unit")
		assert.Equal(t, contract.CauseOrder, res.Cause)
	}},
	{"a fleet's requests never put more than N in any window of the app's unit", func(t *testing.T, s store.Store, clock *fakeClock, k []string) {
		a, b, app := k[0], k[1], k[2]
		type sent struct {
			at   time.Duration
			cost int
		}
		var log []sent
		costs := []int{30, 70, 10, 90, 50, 50, 20, 80, 40, 60, 100, 0, 25, 75}
		var now time.Duration
		for i, c := range costs {
			tok := []string{a, b}[i%2]
			res := reserve(t, s, tok, appTokens(tok, app, c, time.Hour))
			require.True(t, res.Allowed, "request %d", i)
			log = append(log, sent{now + res.Delay, c})
			if i == 8 {
				settle(t, s, res, 5) // a refund: the next may go sooner
				log[i].cost = 5
			}
			clock.Advance(30 * time.Millisecond)
			now += 30 * time.Millisecond
		}
		for _, start := range log {
			sum := 0
			for _, e := range log {
				if e.at >= start.at && e.at < start.at+time.Second {
					sum += e.cost
				}
			}
			assert.LessOrEqual(t, sum, 100, "the window from %s", start.at)
		}
		assert.Greater(t, log[len(log)-1].at, 5*time.Second, "the unit, not the requests, paced them")
	}},
}
