package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// TestFeedbackMarginConformance runs the learned margin's cases (widening,
// doubling, cap, probe) on every store, on a fake clock.
func TestFeedbackMarginConformance(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for _, c := range marginCases {
				t.Run(c.name, func(t *testing.T) {
					clock := newFakeClock()
					s := im.open(t, clock.Now)
					fb, ok := s.(contract.Feedback)
					require.True(t, ok, "%T implements contract.Feedback", s)
					c.run(t, s, fb, clock, uniqueKey(t))
				})
			}
		})
	}
}

// widen is the feedback of a refusal at a window edge: w beyond the rule's
// margin, the refused slot age before now, at most 100ms.
func widen(w, age time.Duration) contract.Learned {
	return contract.Learned{Margin: w, MarginTTL: time.Minute, MarginCap: 100 * ms, MarginAge: age}
}

// edgeDelay is the delay of the second of two requests of 1 per second on
// key, sent after a quiet spell (the clock moves 2 minutes... no: 3s on,
// the log holds nothing in any window): one second plus the learned margin.
func edgeDelay(t *testing.T, s store.Store, clock *fakeClock, key string) time.Duration {
	t.Helper()
	clock.Advance(3 * time.Second)
	r := req(1, time.Hour, lim(1, time.Second))
	require.Zero(t, reserve(t, s, key, r).Delay)
	return reserve(t, s, key, r).Delay
}

var marginCases = []feedbackCase{
	{"a learned margin widens every window limit of the log, not a paced limit nor a counting algorithm", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(2, time.Second), lim(3, 2*time.Second))
		assert.Equal(t, []time.Duration{0, 0}, delays(t, s, key, r, 2))
		learn(t, fb, key, widen(100*ms, 0))
		res := reserve(t, s, key, r)
		assert.Equal(t, 1100*ms, res.Delay, "the window of 2 per second is 1.1s wide")
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 0, res.Limit, "set by the window limit")
		res = reserve(t, s, key, r)
		assert.Equal(t, 2100*ms, res.Delay, "the window of 3 per 2s is 2.1s wide")
		assert.Equal(t, 1, res.Limit)

		learn(t, fb, key+"p", widen(100*ms, 0))
		assert.Equal(t, []time.Duration{0, 100 * ms, 200 * ms}, delays(t, s, key+"p", req(1, time.Hour, paced(10, time.Second, 0)), 3),
			"a paced limit keeps its spacing")
		learn(t, fb, key+"f", widen(100*ms, 0))
		fixed := algReq(contract.FixedWindow, 1, time.Hour, lim(1, time.Hour))
		assert.Zero(t, reserve(t, s, key+"f", fixed).Delay)

		clock.Advance(61 * time.Second)
		assert.Equal(t, time.Second, edgeDelay(t, s, clock, key), "ended with its TTL")
	}},
	{"a widening doubles the margin the refused slot was placed under, takes the larger of an older one, up to the cap", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		assert.Equal(t, time.Second, edgeDelay(t, s, clock, key), "no margin learned")
		learn(t, fb, key, widen(10*ms, 0))
		assert.Equal(t, 1010*ms, edgeDelay(t, s, clock, key), "the first: as asked")
		learn(t, fb, key, widen(10*ms, 4*time.Second))
		assert.Equal(t, 1010*ms, edgeDelay(t, s, clock, key), "a slot placed before the margin was: the larger of the two")
		learn(t, fb, key, widen(10*ms, time.Second))
		assert.Equal(t, 1030*ms, edgeDelay(t, s, clock, key), "a slot placed under it: 2m + w")
		learn(t, fb, key, widen(10*ms, 0))
		learn(t, fb, key, widen(10*ms, 0))
		assert.Equal(t, 1100*ms, edgeDelay(t, s, clock, key), "never above the cap")
	}},
	{"a probe halves a margin left alone, and drops it below a millisecond", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		probe := contract.Learned{MarginProbe: 5 * time.Second}
		learn(t, fb, key, probe)
		assert.Equal(t, time.Second, edgeDelay(t, s, clock, key), "no margin held: a probe sets none")
		learn(t, fb, key+"w", widen(8*ms, 0))
		learn(t, fb, key+"w", probe)
		assert.Equal(t, 1008*ms, edgeDelay(t, s, clock, key+"w"), "widened just now (3s ago): the probe waits")
		clock.Advance(2 * time.Second)
		learn(t, fb, key+"w", probe)
		learn(t, fb, key+"w", probe)
		assert.Equal(t, 1004*ms, edgeDelay(t, s, clock, key+"w"), "left alone 5s: halved, once")
		for _, want := range []time.Duration{1002 * ms, 1001 * ms, time.Second} {
			clock.Advance(2 * time.Second)
			learn(t, fb, key+"w", probe)
			assert.Equal(t, want, edgeDelay(t, s, clock, key+"w"))
		}
	}},
	{"LearnEffect says the margin a widening or a probe leaves, and the spacing of a pace a probe sped up", func(t *testing.T, s store.Store, _ contract.Feedback, clock *fakeClock, key string) {
		ef, ok := s.(contract.Effector)
		require.True(t, ok, "%T implements contract.Effector", s)
		effect := func(key string, l contract.Learned) contract.Effect {
			t.Helper()
			e, err := ef.LearnEffect(ctx, key, l)
			require.NoError(t, err)
			return e
		}
		assert.Equal(t, contract.Effect{Margin: 10 * ms, MarginFor: time.Minute}, effect(key, widen(10*ms, 0)), "the first widening: as asked")
		clock.Advance(time.Second)
		assert.Equal(t, contract.Effect{Margin: 30 * ms, MarginFor: time.Minute}, effect(key, widen(10*ms, 500*ms)), "placed under it: 2m + w")
		probe := contract.Learned{MarginProbe: 5 * time.Second}
		assert.Equal(t, contract.Effect{}, effect(key, probe), "widened just now: the probe does nothing")
		clock.Advance(5 * time.Second)
		assert.Equal(t, contract.Effect{Margin: 15 * ms, MarginFor: 55 * time.Second, Narrowed: true}, effect(key, probe), "halved")
		assert.Equal(t, contract.Effect{}, effect(key, contract.Learned{Pause: time.Second}), "a pause alone: nothing to say")

		pace := contract.Learned{Pace: paced(10, time.Second, 0), PaceTTL: time.Minute}
		assert.Equal(t, contract.Effect{}, effect(key+"p", pace))
		effect(key+"p", contract.Learned{Pace: paced(10, 1100*ms, 0), PaceTTL: time.Minute}) // slowed to 110ms
		hurry := contract.Learned{Pace: paced(10, time.Second, 0), PaceTTL: time.Minute, Probe: 5 * time.Second}
		assert.Equal(t, contract.Effect{}, effect(key+"p", hurry), "slowed just now: the probe does nothing")
		clock.Advance(5 * time.Second)
		assert.Equal(t, contract.Effect{Hurried: true, Spacing: 105 * ms}, effect(key+"p", hurry), "halfway back")
	}},
	{"an invalid margin is refused with ErrInvalidFeedback", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		for name, l := range map[string]contract.Learned{
			"negative margin":  {Margin: -ms, MarginTTL: time.Second, MarginCap: ms},
			"margin no TTL":    {Margin: ms, MarginCap: ms},
			"margin above cap": {Margin: 2 * ms, MarginTTL: time.Second, MarginCap: ms},
			"negative age":     {Margin: ms, MarginTTL: time.Second, MarginCap: ms, MarginAge: -ms},
			"negative probe":   {MarginProbe: -time.Second},
		} {
			assert.ErrorIs(t, fb.Learn(ctx, key, l), contract.ErrInvalidFeedback, name)
		}
		assert.Equal(t, time.Second, edgeDelay(t, s, clock, key), "nothing was recorded")
	}},
}
