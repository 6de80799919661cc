package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// TestFeedbackConformance runs the same feedback cases (pauses, learned
// limits, budgets) on every store, on a fake clock.
func TestFeedbackConformance(t *testing.T) {
	for _, im := range impls(t) {
		t.Run(im.name, func(t *testing.T) {
			for _, c := range feedbackCases {
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

type feedbackCase struct {
	name string
	run  func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string)
}

func learn(t *testing.T, fb contract.Feedback, key string, l contract.Learned) {
	t.Helper()
	require.NoError(t, fb.Learn(ctx, key, l))
}

var feedbackCases = []feedbackCase{
	{"feedback to a busy key holds its next slots, also after the last one is cancelled", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		r := req(1, 2*time.Second, lim(100, time.Second))
		for range 3 {
			require.Zero(t, reserve(t, s, key, r).Delay)
		}
		learn(t, fb, key, contract.Learned{Limit: lim(1, time.Second), LimitTTL: 10 * time.Second})
		res := reserve(t, s, key, r)
		assert.Equal(t, time.Second, res.Delay, "the learned 1/s holds the next slot a second after the last")
		assert.Equal(t, contract.CauseLearned, res.Cause)
		require.NoError(t, s.Cancel(ctx, res))
		res = reserve(t, s, key, r)
		assert.Equal(t, time.Second, res.Delay, "the cancelled reservation took nothing of the learned limit with it")
		assert.Equal(t, contract.CauseLearned, res.Cause)
		clock.Advance(11 * time.Second)
		res = reserve(t, s, key, r)
		assert.Zero(t, res.Delay, "the learned limit has expired")
		assert.Equal(t, contract.CauseNone, res.Cause)
		require.NoError(t, fb.Pause(ctx, key, time.Second))
		res = reserve(t, s, key, r)
		assert.Equal(t, time.Second, res.Delay, "a pause after the learned limit expired is seen")
		assert.Equal(t, contract.CauseUpstream, res.Cause)
	}},
	{"a pause holds every slot back to its end", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		require.NoError(t, fb.Pause(ctx, key, 2*time.Second))
		res := reserve(t, s, key, req(1, time.Minute, lim(10, time.Second)))
		require.True(t, res.Allowed)
		assert.Equal(t, 2*time.Second, res.Delay)
		assert.Equal(t, contract.CauseUpstream, res.Cause)
		assert.Equal(t, 0, res.Limit)
		res = reserve(t, s, key, req(1, time.Minute, lim(10, time.Second)))
		assert.Equal(t, 2*time.Second, res.Delay, "the pause holds the next one too; the limit does not")
	}},
	{"a pause past MaxWait is refused with RetryAfter to its end", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		require.NoError(t, fb.Pause(ctx, key, 3*time.Second))
		clock.Advance(time.Second)
		res := reserve(t, s, key, req(1, time.Second, lim(10, time.Second)))
		assert.False(t, res.Allowed)
		assert.Equal(t, contract.CauseUpstream, res.Cause)
		assert.Equal(t, 2*time.Second, res.RetryAfter)
		res = reserve(t, s, key, req(1, 0, lim(10, time.Second)))
		assert.False(t, res.Allowed, "fail fast")
		clock.Advance(2 * time.Second)
		res = reserve(t, s, key, req(1, 0, lim(10, time.Second)))
		assert.True(t, res.Allowed, "the pause is over")
		assert.Equal(t, contract.CauseNone, res.Cause)
	}},
	{"a pause past MaxServerWait is refused even within MaxWait", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		require.NoError(t, fb.Pause(ctx, key, 5*time.Second))
		r := req(1, time.Minute, lim(1, time.Second))
		r.MaxServerWait = 4 * time.Second
		res := reserve(t, s, key, r)
		assert.False(t, res.Allowed)
		assert.Equal(t, contract.CauseUpstream, res.Cause)
		assert.Equal(t, 5*time.Second, res.RetryAfter)
		r.MaxServerWait = 5 * time.Second
		res = reserve(t, s, key, r)
		assert.True(t, res.Allowed)
		assert.Equal(t, 5*time.Second, res.Delay)
		// The limit's own wait is not bounded by MaxServerWait.
		res = reserve(t, s, key, r)
		assert.True(t, res.Allowed)
		assert.Equal(t, 6*time.Second, res.Delay)
		assert.Equal(t, contract.CauseLimit, res.Cause)
		assert.Equal(t, 0, res.Limit)
	}},
	{"pauses merge to the latest end, never shortened", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		require.NoError(t, fb.Pause(ctx, key, 2*time.Second))
		require.NoError(t, fb.Pause(ctx, key, time.Second))
		res := reserve(t, s, key, req(1, time.Minute, lim(10, time.Second)))
		assert.Equal(t, 2*time.Second, res.Delay)
		clock.Advance(500 * time.Millisecond)
		require.NoError(t, fb.Pause(ctx, key, 3*time.Second))
		res = reserve(t, s, key, req(1, time.Minute, lim(10, time.Second)))
		assert.Equal(t, 3*time.Second, res.Delay, "the later end wins")
	}},
	{"a pause does not touch other keys", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		require.NoError(t, fb.Pause(ctx, key+"a", time.Hour))
		assert.True(t, reserve(t, s, key+"b", req(1, 0, lim(1, time.Second))).Allowed)
		assert.False(t, reserve(t, s, key+"a", req(1, 0, lim(1, time.Second))).Allowed)
	}},
	{"a learned limit tightens the configured one", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Limit: lim(2, time.Second), LimitTTL: time.Minute})
		r := req(1, time.Minute, lim(10, time.Second))
		var delays []time.Duration
		var causes []contract.Cause
		for range 5 {
			res := reserve(t, s, key, r)
			delays = append(delays, res.Delay)
			causes = append(causes, res.Cause)
		}
		assert.Equal(t, []time.Duration{0, 0, time.Second, time.Second, 2 * time.Second}, delays)
		assert.Equal(t, []contract.Cause{contract.CauseNone, contract.CauseNone, contract.CauseLearned, contract.CauseLearned, contract.CauseLearned}, causes)
	}},
	{"a learned limit never loosens: the configured one still binds", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Limit: lim(100, time.Second), LimitTTL: time.Minute})
		r := req(1, 0, lim(2, time.Second))
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.False(t, reserve(t, s, key, r).Allowed)
	}},
	{"a learned limit with a window and an N above the request's is ignored", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Limit: lim(4, time.Hour), LimitTTL: time.Hour})
		r := req(1, 0, lim(3, time.Second))
		for i := range 3 {
			assert.True(t, reserve(t, s, key, r).Allowed, "request %d", i)
		}
		clock.Advance(time.Second)
		for i := range 3 {
			assert.True(t, reserve(t, s, key, r).Allowed, "request %d a second later", i)
		}
	}},
	{"a learned limit over a longer window counts when its N is at most the request's, and the log keeps that window", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Limit: lim(2, 10*time.Second), LimitTTL: time.Minute})
		r := req(1, 0, lim(3, time.Second))
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.True(t, reserve(t, s, key, r).Allowed)
		res := reserve(t, s, key, r)
		assert.False(t, res.Allowed)
		assert.Equal(t, contract.CauseLearned, res.Cause)
		assert.Equal(t, 10*time.Second, res.RetryAfter)
		clock.Advance(5 * time.Second)
		res = reserve(t, s, key, r)
		assert.False(t, res.Allowed, "the entries are kept past the request's own window")
		assert.Equal(t, 5*time.Second, res.RetryAfter)
		clock.Advance(5 * time.Second)
		assert.True(t, reserve(t, s, key, r).Allowed)
	}},
	{"a learned limit expires", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Limit: lim(1, time.Second), LimitTTL: 2 * time.Second})
		r := req(1, 0, lim(10, time.Second))
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.False(t, reserve(t, s, key, r).Allowed)
		clock.Advance(2 * time.Second)
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.True(t, reserve(t, s, key, r).Allowed, "forgotten")
	}},
	{"the latest learned limit replaces the earlier", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Limit: lim(1, time.Second), LimitTTL: time.Minute})
		learn(t, fb, key, contract.Learned{Limit: lim(3, time.Second), LimitTTL: time.Minute})
		r := req(1, 0, lim(10, time.Second))
		for i := range 3 {
			assert.True(t, reserve(t, s, key, r).Allowed, "request %d", i)
		}
		assert.False(t, reserve(t, s, key, r).Allowed)
	}},
	{"a budget is spent, then holds until its reset", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Remaining: 2, Reset: 10 * time.Second})
		r := req(1, time.Minute, lim(100, time.Second))
		assert.Equal(t, time.Duration(0), reserve(t, s, key, r).Delay)
		assert.Equal(t, time.Duration(0), reserve(t, s, key, r).Delay)
		res := reserve(t, s, key, r)
		assert.Equal(t, 10*time.Second, res.Delay)
		assert.Equal(t, contract.CauseUpstream, res.Cause)
		r.MaxServerWait = 5 * time.Second
		res = reserve(t, s, key, r)
		assert.False(t, res.Allowed)
		assert.Equal(t, contract.CauseUpstream, res.Cause)
		assert.Equal(t, 10*time.Second, res.RetryAfter)
	}},
	{"a budget in the same window only shrinks; a later window replaces it", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Remaining: 1, Reset: 10 * time.Second})
		learn(t, fb, key, contract.Learned{Remaining: 5, Reset: 11 * time.Second})
		r := req(1, 0, lim(100, time.Second))
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.False(t, reserve(t, s, key, r).Allowed, "one remained, not five")
		learn(t, fb, key, contract.Learned{Remaining: 2, Reset: 30 * time.Second})
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.True(t, reserve(t, s, key, r).Allowed)
		assert.False(t, reserve(t, s, key, r).Allowed)
		clock.Advance(30 * time.Second)
		assert.True(t, reserve(t, s, key, r).Allowed, "after the reset the budget says nothing")
	}},
	{"remaining 0 is a pause until the reset", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Remaining: 0, Reset: 3 * time.Second})
		res := reserve(t, s, key, req(1, 0, lim(100, time.Second)))
		assert.False(t, res.Allowed)
		assert.Equal(t, contract.CauseUpstream, res.Cause)
		assert.Equal(t, 3*time.Second, res.RetryAfter)
	}},
	{"a learned pace spaces a key's log requests, a cancel gives its time back", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(100, time.Second))
		expect(t, s, key, r, allowed{0, contract.CauseNone, 0}, "before: free")
		expect(t, s, key, r, allowed{0, contract.CauseNone, 0}, "before: a burst")
		learn(t, fb, key, contract.Learned{Pace: paced(10, time.Second, 0), PaceTTL: time.Minute})
		expect(t, s, key, r, allowed{0, contract.CauseNone, 0}, "no pace state yet: at once")
		expect(t, s, key, r, allowed{100 * ms, contract.CauseLearned, 0}, "then one every 100ms")
		last := expect(t, s, key, r, allowed{200 * ms, contract.CauseLearned, 0}, "then one every 100ms")
		require.NoError(t, s.Cancel(ctx, last))
		expect(t, s, key, r, allowed{200 * ms, contract.CauseLearned, 0}, "the cancelled reservation gave its time back")
		clock.Advance(time.Minute)
		assert.Equal(t, []time.Duration{0, 0, 0}, delays(t, s, key, r, 3), "the learned pace has expired")
	}},
	{"a learned pace and a request's own: the larger spacing, the smaller burst", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		own := req(1, time.Hour, lim(100, time.Second), paced(10, time.Second, 3))
		learn(t, fb, key, contract.Learned{Pace: paced(5, time.Second, 0), PaceTTL: time.Minute})
		assert.Equal(t, []time.Duration{0, 200 * ms}, delays(t, s, key, own, 2), "5/s, burst 0")
		last := expect(t, s, key, own, allowed{400 * ms, contract.CauseLearned, 0}, "5/s, burst 0")
		require.NoError(t, s.Cancel(ctx, last))
		expect(t, s, key, own, allowed{400 * ms, contract.CauseLearned, 0}, "the cancel gave back the learned spacing")
		learn(t, fb, key+"b", contract.Learned{Pace: paced(20, time.Second, 9), PaceTTL: time.Minute})
		assert.Equal(t, []time.Duration{0, 0, 0, 0, 100 * ms}, delays(t, s, key+"b", own, 5), "looser: the request's own")
		learn(t, fb, key+"c", contract.Learned{Pace: paced(20, time.Second, 0), PaceTTL: time.Minute})
		expect(t, s, key+"c", own, allowed{0, contract.CauseNone, 0}, "first")
		expect(t, s, key+"c", own, allowed{100 * ms, contract.CauseLearned, 0}, "the own spacing, the learned burst")
		alone := req(1, time.Hour, paced(10, time.Second, 3))
		learn(t, fb, key+"d", contract.Learned{Pace: paced(5, time.Second, 0), PaceTTL: time.Minute})
		assert.Equal(t, []time.Duration{0, 200 * ms, 400 * ms}, delays(t, s, key+"d", alone, 3), "a paced limit alone")
	}},
	{"a pace learned while one holds slows it, never hurries it", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(100, time.Second))
		learn(t, fb, key, contract.Learned{Pace: paced(5, time.Second, 0), PaceTTL: time.Minute})
		learn(t, fb, key, contract.Learned{Pace: paced(10, time.Second, 3), PaceTTL: time.Minute})
		assert.Equal(t, []time.Duration{0, 200 * ms, 400 * ms}, delays(t, s, key, r, 3), "the slower spacing, burst 0")
		learn(t, fb, key+"b", contract.Learned{Pace: paced(10, time.Second, 0), PaceTTL: time.Minute})
		learn(t, fb, key+"b", contract.Learned{Pace: paced(5, time.Second, 0), PaceTTL: time.Minute})
		assert.Equal(t, []time.Duration{0, 200 * ms}, delays(t, s, key+"b", r, 2), "slowed")
		clock.Advance(2 * time.Minute)
		learn(t, fb, key, contract.Learned{Pace: paced(10, time.Second, 0), PaceTTL: time.Minute})
		assert.Equal(t, []time.Duration{0, 100 * ms}, delays(t, s, key, r, 2), "once the old one ended, the new one alone")
	}},
	{"a probe hurries a pace left alone halfway to the configured rate, never past it", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		r := req(1, time.Hour, lim(100, time.Second))
		probe := contract.Learned{Pace: paced(10, time.Second, 0), PaceTTL: time.Minute, Probe: 5 * time.Second}
		learn(t, fb, key, probe)
		assert.Equal(t, []time.Duration{0, 0}, delays(t, s, key, r, 2), "no pace held: a probe sets none")
		learn(t, fb, key, contract.Learned{Pace: paced(4, time.Second, 0), PaceTTL: time.Minute})
		learn(t, fb, key, probe)
		assert.Equal(t, []time.Duration{0, 250 * ms}, delays(t, s, key, r, 2), "slowed just now: the probe waits")
		clock.Advance(5 * time.Second)
		learn(t, fb, key, probe)
		learn(t, fb, key, probe)
		assert.Equal(t, []time.Duration{0, 175 * ms}, delays(t, s, key, r, 2), "left alone 5s: halfway, once")
		clock.Advance(5 * time.Second)
		learn(t, fb, key, contract.Learned{Pace: paced(5, time.Second, 0), PaceTTL: time.Minute})
		learn(t, fb, key, probe)
		assert.Equal(t, []time.Duration{0, 200 * ms}, delays(t, s, key, r, 2), "slowed again: the probe waits")
		for range 9 {
			clock.Advance(5 * time.Second)
			learn(t, fb, key, probe)
		}
		assert.Equal(t, []time.Duration{0, 100 * ms}, delays(t, s, key, r, 2), "at the configured rate, never faster")
	}},
	{"a learned pace is ignored by the counting algorithms", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		learn(t, fb, key, contract.Learned{Pace: paced(1, time.Second, 0), PaceTTL: time.Minute})
		for _, alg := range []contract.Algorithm{contract.FixedWindow, contract.SlidingCounter} {
			r := algReq(alg, 1, time.Hour, lim(100, time.Hour))
			assert.Equal(t, []time.Duration{0, 0, 0}, delays(t, s, key, r, 3), alg.String())
		}
	}},
	{"invalid feedback is refused with ErrInvalidFeedback", func(t *testing.T, s store.Store, fb contract.Feedback, clock *fakeClock, key string) {
		for name, l := range map[string]contract.Learned{
			"negative pause":     {Pause: -time.Second},
			"huge pause":         {Pause: contract.MaxFeedback + time.Second},
			"negative N":         {Limit: lim(-1, time.Second), LimitTTL: time.Second},
			"limit no window":    {Limit: lim(1, 0), LimitTTL: time.Second},
			"limit no TTL":       {Limit: lim(1, time.Second)},
			"negative remaining": {Remaining: -1, Reset: time.Second},
			"negative reset":     {Reset: -time.Second},
			"pace not paced":     {Pace: lim(1, time.Second), PaceTTL: time.Second},
			"pace no window":     {Pace: paced(1, 0, 0), PaceTTL: time.Second},
			"pace no TTL":        {Pace: paced(1, time.Second, 0)},
			"pace burst above N": {Pace: paced(1, time.Second, 2), PaceTTL: time.Second},
			"pace negative N":    {Pace: paced(-1, time.Second, 0), PaceTTL: time.Second},
			"probe without pace": {Probe: time.Second, Pause: time.Second},
			"negative probe":     {Pace: paced(1, time.Second, 0), PaceTTL: time.Second, Probe: -time.Second},
		} {
			assert.ErrorIs(t, fb.Learn(ctx, key, l), contract.ErrInvalidFeedback, name)
		}
		assert.ErrorIs(t, fb.Pause(ctx, "", time.Second), contract.ErrInvalidFeedback, "empty key")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.Error(t, fb.Pause(cctx, key, time.Second), "a cancelled context")
		assert.True(t, reserve(t, s, key, req(1, 0, lim(1, time.Second))).Allowed, "nothing was recorded")
	}},
}

// TestFeedbackKeyExpires checks on a real redis-server that the feedback hash
// shares the log's hash tag and expires with its longest-lived field.
func TestFeedbackKeyExpires(t *testing.T) {
	srv := sharedOrSkip(t)
	rdb := srv.Client(t)
	st, err := redisstore.NewRedis(rdb)
	require.NoError(t, err)
	key := uniqueKey(t)
	assert.Equal(t, st.RedisKey(key)+":p", st.FeedbackKey(key))
	// Cluster slots hash the text between the first braces: the same for both.
	tag := func(k string) string { return k[strings.Index(k, "{") : strings.Index(k, "}")+1] }
	assert.Equal(t, tag(st.RedisKey(key)), tag(st.FeedbackKey(key)))
	require.NoError(t, st.Pause(ctx, key, 1500*time.Millisecond))
	ttl, err := rdb.PTTL(ctx, st.FeedbackKey(key)).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Second)
	assert.LessOrEqual(t, ttl, 1502*time.Millisecond)
	require.NoError(t, st.Learn(ctx, key, contract.Learned{Limit: lim(1, time.Second), LimitTTL: 10 * time.Second}))
	ttl, err = rdb.PTTL(ctx, st.FeedbackKey(key)).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 9*time.Second, "extended to the learned limit's end")
	require.NoError(t, st.Pause(ctx, key, time.Millisecond))
	ttl, err = rdb.PTTL(ctx, st.FeedbackKey(key)).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 9*time.Second, "never shortened")
}

// TestLearnedWindowKeepsTheLog checks on a real redis-server that a learned
// limit over a longer window than the request's keeps the log and its seen
// mark for that window, also when an entry written before it was learned set
// them for the request's own.
func TestLearnedWindowKeepsTheLog(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	key := uniqueKey(t)
	r := contract.Request{Limits: []contract.Limit{lim(5, 100*time.Millisecond)}, Cost: 1}
	res, err := s.Reserve(ctx, key, r)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.NoError(t, s.Learn(ctx, key, contract.Learned{Limit: lim(2, 5*time.Second), LimitTTL: time.Minute}))
	res, err = s.Reserve(ctx, key, r)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	assert.Greater(t, c.PTTL(ctx, s.RedisKey(key)).Val(), 4*time.Second, "the log lives for the learned window")
	assert.Greater(t, c.PTTL(ctx, s.RedisKey(key)+":seen").Val(), 4*time.Second, "and its mark")
	time.Sleep(300 * time.Millisecond) // past the request's window and the TTL it set
	res, err = s.Reserve(ctx, key, r)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the learned window still holds both entries")
	assert.Equal(t, contract.CauseLearned, res.Cause)
}

// TestFeedbackMemory logs what a key's feedback hash costs on redis-server,
// with every field set: go test -run TestFeedbackMemory -v ./store/
func TestFeedbackMemory(t *testing.T) {
	srv := sharedOrSkip(t)
	rdb := srv.Client(t)
	st, err := redisstore.NewRedis(rdb)
	require.NoError(t, err)
	key := uniqueKey(t)
	require.NoError(t, st.Learn(ctx, key, contract.Learned{
		Pause: time.Minute, Limit: lim(40, time.Second), LimitTTL: time.Hour, Remaining: 4999, Reset: time.Hour,
		Pace: paced(100, time.Second, 0), PaceTTL: time.Hour,
		Margin: 10 * time.Millisecond, MarginTTL: time.Hour, MarginCap: 100 * time.Millisecond,
	}))
	n, err := rdb.MemoryUsage(ctx, st.FeedbackKey(key)).Result()
	require.NoError(t, err)
	fields, err := rdb.HLen(ctx, st.FeedbackKey(key)).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(14), fields)
	assert.Less(t, n, int64(512), "a small listpack")
	t.Logf("feedback hash with all %d fields: %d bytes (MEMORY USAGE)", fields, n)
}

// TestFeedbackDifferential drives the memory store and each Redis store
// through the same random sequence of pauses, learned limits, budgets,
// reservations and cancels on one fake clock, and requires the same answer
// from both at every step: the Lua and the Go implementations of feedback
// must agree exactly.
func TestFeedbackDifferential(t *testing.T) {
	all := impls(t)
	for _, im := range all[1:] {
		t.Run(im.name, func(t *testing.T) {
			for seed := range uint64(4) {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
					clock := newFakeClock()
					mem := all[0].open(t, clock.Now)
					red := im.open(t, clock.Now)
					key := uniqueKey(t)
					rng := rand.New(rand.NewPCG(seed, 7))
					limits := []contract.Limit{lim(3+rng.IntN(5), time.Second), lim(10+rng.IntN(10), 5*time.Second)}
					if seed%2 == 1 { // a pace that starts slowly: pauses and learned paces meet it
						limits = append(limits, contract.Limit{N: 4 + rng.IntN(8), Per: time.Second, Paced: true, Burst: 2 + rng.IntN(3), SlowStart: true})
					}
					var granted []contract.Reservation
					seen := map[string]int{}
					for step := range 600 {
						var l contract.Learned
						switch op := rng.IntN(20); op {
						case 0:
							l.Pause = time.Duration(rng.IntN(1500)) * time.Millisecond
						case 1, 2: // over windows longer than the limits' too, held or not by N
							l.Limit = lim(1+rng.IntN(25), time.Duration(500+rng.IntN(6000))*time.Millisecond)
							l.LimitTTL = time.Duration(1+rng.IntN(8)) * time.Second
						case 3:
							l.Remaining, l.Reset = rng.IntN(10), time.Duration(rng.IntN(5000))*time.Millisecond
						case 8:
							l.Pace = paced(1+rng.IntN(8), time.Duration(500+rng.IntN(2000))*time.Millisecond, rng.IntN(2))
							l.PaceTTL = time.Duration(1+rng.IntN(4)) * time.Second
						case 9: // a refusal at a window edge (margin_test.go)
							l.Margin, l.MarginTTL = time.Duration(1+rng.IntN(300))*time.Millisecond, time.Duration(1+rng.IntN(4))*time.Second
							l.MarginCap, l.MarginAge = 400*time.Millisecond, time.Duration(rng.IntN(2000))*time.Millisecond
						case 10:
							l.MarginProbe = time.Duration(1+rng.IntN(3000)) * time.Millisecond
						case 4, 5:
							if len(granted) > 0 {
								i := rng.IntN(len(granted))
								require.NoError(t, mem.Cancel(ctx, granted[i]))
								require.NoError(t, red.Cancel(ctx, granted[i]))
								granted = append(granted[:i], granted[i+1:]...)
							}
						case 6, 7:
							clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
						default:
							r := req(1+rng.IntN(3), time.Duration(rng.IntN(4000))*time.Millisecond, limits...)
							r.MaxServerWait = time.Duration(rng.IntN(4000)) * time.Millisecond
							a := reserve(t, mem, key, r)
							b := reserve(t, red, key, r)
							require.Equal(t, a, b, "step %d: %+v", step, r)
							if a.Allowed {
								granted = append(granted, a)
							}
							seen[fmt.Sprintf("allowed=%v cause=%v", a.Allowed, a.Cause)]++
						}
						if l != (contract.Learned{}) {
							require.NoError(t, mem.(contract.Feedback).Learn(ctx, key, l))
							require.NoError(t, red.(contract.Feedback).Learn(ctx, key, l))
						}
						clock.Advance(time.Duration(rng.IntN(50)) * time.Millisecond)
					}
					t.Logf("answers: %v", seen)
					// The sequence reaches every kind of answer, or it proves little.
					kinds := []string{"allowed=true cause=upstream", "allowed=false cause=upstream", "allowed=true cause=learned", "allowed=true cause=limit"}
					if seed%2 == 0 {
						kinds = append(kinds, "allowed=true cause=order") // a pace orders the slots itself
					}
					for _, k := range kinds {
						assert.Positive(t, seen[k], k)
					}
				})
			}
		})
	}
}

// TestRedisFeedbackMark checks the mark that lets the log script (internal/script/log.lua) skip reading
// the feedback hash: feedback marks the log's last entry, reservations mark
// theirs while the feedback lasts, and the first one after it ends does not.
func TestRedisFeedbackMark(t *testing.T) {
	c := realRedis(t)
	clock := newFakeClock()
	s, err := redisstore.NewRedis(c, redisstore.WithClientTime(clock.Now))
	require.NoError(t, err)
	key := uniqueKey(t)
	rk := s.RedisKey(key)
	lastEntry := func() int64 {
		t.Helper()
		v, err := c.LIndex(ctx, rk, -1).Int64()
		require.NoError(t, err)
		return v
	}
	r := req(1, time.Minute, lim(100, time.Second))
	reserve(t, s, key, r)
	clock.Advance(time.Millisecond) // two slots, not two equal entries
	second := reserve(t, s, key, r)
	assert.Positive(t, lastEntry(), "no feedback: no mark")
	require.NoError(t, s.Pause(ctx, key, 500*time.Millisecond))
	assert.Equal(t, -second.Slot, lastEntry(), "feedback marks the last entry")
	require.NoError(t, s.Cancel(ctx, second))
	assert.Negative(t, lastEntry(), "Cancel of a marked entry moves the mark to the new last entry")
	res := reserve(t, s, key, r)
	assert.Equal(t, contract.CauseUpstream, res.Cause, "the pause is seen after the marked entry was cancelled")
	assert.Equal(t, -res.Slot, lastEntry(), "a reservation while the pause lasts carries the mark")
	clock.Advance(time.Second)
	res = reserve(t, s, key, r)
	assert.Equal(t, contract.CauseNone, res.Cause)
	assert.Equal(t, res.Slot, lastEntry(), "once the pause is over the mark is dropped")
}
