package store_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// logBuffer is a slog.Logger whose output a test reads.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// TestRedisWrongTypeHeals: another program SETs a string where a key's state
// lives (WRONGTYPE for every script): the store repairs that key (deletes
// the string: everything under its prefix is its own), retries once, and
// the request is answered; the repair is logged. Another key is untouched.
func TestRedisWrongTypeHeals(t *testing.T) {
	c := realRedis(t)
	var logs logBuffer
	s, err := redisstore.NewRedis(c, redisstore.WithLogger(logs.logger()))
	require.NoError(t, err)
	for _, alg := range []contract.Algorithm{contract.SlidingLog, contract.FixedWindow, contract.SlidingCounter, contract.Buckets} {
		t.Run(alg.String(), func(t *testing.T) {
			key, other := uniqueKey(t), uniqueKey(t)
			r := algReq(alg, 1, 0, lim(10, time.Minute))
			require.True(t, reserve(t, s, other, r).Allowed)
			require.NoError(t, c.Set(ctx, s.RedisKeyFor(key, alg), "x", 0).Err())

			res := reserve(t, s, key, r)
			assert.True(t, res.Allowed, "healed at once")
			assert.Contains(t, logs.String(), "repaired a rate key in a wrong state")
			assert.Contains(t, logs.String(), "deleted (another type)")
			typ := c.Type(ctx, s.RedisKeyFor(key, alg)).Val()
			assert.NotEqual(t, "string", typ)
			require.NoError(t, s.Cancel(ctx, res))
			assert.True(t, reserve(t, s, other, r).Allowed, "the other key is untouched")
		})
	}
}

// TestRedisFeedbackWrongTypeHeals: a string where the feedback hash lives,
// and the log marked so that the reserve script reads it.
func TestRedisFeedbackWrongTypeHeals(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	key := uniqueKey(t)
	r := req(1, 0, lim(10, time.Minute))
	reserve(t, s, key, r)
	require.NoError(t, s.Pause(ctx, key, time.Millisecond)) // marks the log
	require.NoError(t, c.Set(ctx, s.FeedbackKey(key), "x", 0).Err())
	time.Sleep(2 * time.Millisecond)
	res := reserve(t, s, key, r)
	assert.True(t, res.Allowed)
	assert.Equal(t, "none", c.Type(ctx, s.FeedbackKey(key)).Val(), "the string is gone (and the pause with it)")
	require.NoError(t, c.Set(ctx, s.FeedbackKey(key), "x", 0).Err())
	require.NoError(t, s.Pause(ctx, key, time.Millisecond), "Learn repairs too")
}

// TestRedisBadEntriesHeal: an entry that is not a number, and one far in the
// future (which would hold the key back until then), are removed, and the
// request is answered as if they had never been there.
func TestRedisBadEntriesHeal(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	r := req(1, time.Second, lim(3, time.Minute))
	now := func() int64 {
		tm, err := c.Time(ctx).Result()
		require.NoError(t, err)
		return tm.UnixMicro()
	}
	for name, bad := range map[string]func() string{
		"not a number":          func() string { return "x" },
		"far future":            func() string { return strconv.FormatInt(now()+48*time.Hour.Microseconds(), 10) },
		"far future, marked":    func() string { return strconv.FormatInt(-(now() + 48*time.Hour.Microseconds()), 10) },
		"infinite":              func() string { return "1e999" },
		"not a number, earlier": func() string { return "oops" },
	} {
		t.Run(name, func(t *testing.T) {
			key := uniqueKey(t)
			require.True(t, reserve(t, s, key, r).Allowed)
			lk := s.RedisKey(key)
			if name == "not a number, earlier" {
				require.NoError(t, c.LPush(ctx, lk, bad()).Err()) // the oldest: read when N entries are
				require.True(t, reserve(t, s, key, r).Allowed)
				res := reserve(t, s, key, r) // reads entry[-3], the bad one
				require.True(t, res.Allowed)
				assert.Equal(t, time.Duration(0), res.Delay)
			} else {
				require.NoError(t, c.RPush(ctx, lk, bad()).Err())
				res := reserve(t, s, key, r)
				require.True(t, res.Allowed)
				assert.Less(t, res.Delay, time.Second, "not held back by the bad entry")
			}
			for _, e := range c.LRange(ctx, lk, 0, -1).Val() {
				v, err := strconv.ParseInt(e, 10, 64)
				require.NoError(t, err, "entry %q", e)
				assert.Less(t, v, now()+time.Hour.Microseconds())
			}
		})
	}
}

// TestRedisPlausibleFutureEntriesStay: reservations a caller with a long
// MaxWait made are in the future, but within the horizon of a caller whose
// MaxWait is shorter by less than MaxAllowance and a window: it is refused by
// them (not repaired away).
func TestRedisPlausibleFutureEntriesStay(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	key := uniqueKey(t)
	long := req(1, 10*time.Hour, lim(1, time.Hour))
	for range 5 {
		require.True(t, reserve(t, s, key, long).Allowed)
	}
	// The newest entry is 4h ahead; this caller's horizon is 3h + 5min + 1h.
	res := reserve(t, s, key, req(1, 3*time.Hour, lim(1, time.Hour)))
	assert.False(t, res.Allowed)
	assert.Greater(t, res.RetryAfter, 4*time.Hour)
	assert.EqualValues(t, 5, c.LLen(ctx, s.RedisKey(key)).Val())
}

// replyErr is a Redis error reply, as go-redis reports one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestRedisUnrepairableKey: when the repair fails too (here every call
// answers WRONGTYPE), Reserve returns a *KeyStateError matching
// ErrKeyState, which says so; Cancel too.
func TestRedisUnrepairableKey(t *testing.T) {
	wrong := replyErr("WRONGTYPE Operation against a key holding the wrong kind of value")
	s, err := redisstore.NewRedis(fakeScripter{err: wrong})
	require.NoError(t, err)
	_, err = s.Reserve(ctx, "k", req(1, 0, lim(1, time.Second)))
	require.ErrorIs(t, err, redisstore.ErrKeyState)
	var ks *redisstore.KeyStateError
	require.ErrorAs(t, err, &ks)
	assert.Equal(t, "k", ks.Key)
	assert.ErrorIs(t, err, wrong)
	assert.Contains(t, err.Error(), "the repair failed")

	// A connection error is no key's state.
	s, err = redisstore.NewRedis(fakeScripter{err: errors.New("dial tcp: connection refused")})
	require.NoError(t, err)
	_, err = s.Reserve(ctx, "k", req(1, 0, lim(1, time.Second)))
	require.Error(t, err)
	assert.NotErrorIs(t, err, redisstore.ErrKeyState)
}

// TestRedisRepairOffTheCommonPath: the repair adds no command to a common
// call (TestRedisLogCommands counts them); here: a healthy key is never
// repaired, and a bad key once.
func TestRedisRepairOffTheCommonPath(t *testing.T) {
	c := realRedis(t)
	var logs logBuffer
	s, err := redisstore.NewRedis(c, redisstore.WithLogger(logs.logger()))
	require.NoError(t, err)
	key := uniqueKey(t)
	r := req(1, 0, lim(1000, time.Minute))
	for range 50 {
		reserve(t, s, key, r)
	}
	assert.Empty(t, logs.String())
	require.NoError(t, c.RPush(ctx, s.RedisKey(key), "x").Err())
	for range 50 {
		reserve(t, s, key, r)
	}
	assert.Equal(t, 1, bytes.Count([]byte(logs.String()), []byte("repaired")), logs.String())
}

var _ redis.Error = replyErr("")

// TestRedisFarFeedbackHeals: a pause or a reset past MaxFeedback from now
// in a key's feedback (which would hold the key back until then) is removed,
// and the request answered; a pause within it stays.
func TestRedisFarFeedbackHeals(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	tm, err := c.Time(ctx).Result()
	require.NoError(t, err)
	far := strconv.FormatInt(tm.Add(contract.MaxFeedback+24*time.Hour).UnixMicro(), 10)
	for _, field := range []string{"p", "r"} {
		t.Run(field, func(t *testing.T) {
			key := uniqueKey(t)
			r := req(1, 0, lim(10, time.Minute))
			// A feedback hash that lives through the reservation (a learned
			// limit that holds nothing back), so that its entry is marked: a
			// pause of a millisecond could end before it, on a slow machine.
			require.NoError(t, s.Learn(ctx, key, contract.Learned{Limit: lim(1000, time.Minute), LimitTTL: time.Minute}))
			reserve(t, s, key, r)
			require.NoError(t, c.HSet(ctx, s.FeedbackKey(key), field, far, "b", 0).Err())
			res := reserve(t, s, key, r)
			assert.True(t, res.Allowed, "not held back by the far time")
			assert.False(t, c.HExists(ctx, s.FeedbackKey(key), field).Val())
		})
	}
	key := uniqueKey(t)
	r := req(1, 0, lim(10, time.Minute))
	reserve(t, s, key, r)
	require.NoError(t, s.Pause(ctx, key, contract.MaxFeedback-time.Hour))
	res := reserve(t, s, key, r)
	assert.False(t, res.Allowed)
	assert.Equal(t, contract.CauseUpstream, res.Cause, "a long pause within MaxFeedback is kept")
}

// TestRedisBadPaceHeals: a paced limit's time in a wrong state (another
// type, not a number, implausibly far ahead) is repaired like a log, and the
// key's reservations go on.
func TestRedisBadPaceHeals(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	paced := contract.Request{Limits: []contract.Limit{lim(5, time.Minute), {N: 10, Per: time.Second, Paced: true, Burst: 1}}, Cost: 1, MaxWait: time.Second}
	for name, spoil := range map[string]func(pk string) error{
		"another type": func(pk string) error { return c.RPush(ctx, pk, "x").Err() },
		"not a number": func(pk string) error { return c.Set(ctx, pk, "x", time.Hour).Err() },
		"far future":   func(pk string) error { return c.Set(ctx, pk, "99999999999999999", time.Hour).Err() },
	} {
		t.Run(name, func(t *testing.T) {
			key := uniqueKey(t)
			require.True(t, reserve(t, s, key, paced).Allowed)
			pk := s.RedisKey(key) + ":pace"
			require.NoError(t, c.Del(ctx, pk).Err())
			require.NoError(t, spoil(pk))
			res := reserve(t, s, key, paced)
			require.True(t, res.Allowed, "repaired, then reserved")
			assert.Less(t, res.Delay, time.Second)
		})
	}
}

// TestRedisUsageOfABadKey: Usage of a key in a wrong state says so with a
// KeyStateError (it changes nothing, so it does not repair), for the log
// and for a counting algorithm.
func TestRedisUsageOfABadKey(t *testing.T) {
	c := realRedis(t)
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	key := uniqueKey(t)
	require.NoError(t, c.RPush(ctx, s.RedisKey(key), "x", "y").Err())
	_, err = s.Usage(ctx, key, req(1, 0, lim(1, time.Minute)))
	require.ErrorIs(t, err, redisstore.ErrKeyState)

	key = uniqueKey(t)
	require.NoError(t, c.HSet(ctx, s.RedisKey(key)+":p", "p", "99999999999999999999").Err())
	_, err = s.Usage(ctx, key, algReq(contract.FixedWindow, 1, 0, lim(1, time.Minute)))
	require.ErrorIs(t, err, redisstore.ErrKeyState)
	_, err = s.Usage(ctx, key, req(1, 0, lim(1, time.Minute)))
	require.ErrorIs(t, err, redisstore.ErrKeyState)
}

// TestRedisKeysKeepAnExpiry: a throttle key that another program wrote
// without a TTL gets one from the store's next writes: a paced time far
// ahead (repaired, then set again) and a log made by an outside RPUSH (its
// TTL from the first write of the next half window).
func TestRedisKeysKeepAnExpiry(t *testing.T) {
	c := realRedis(t)
	clock := newFakeClock()
	s, err := redisstore.NewRedis(c, redisstore.WithClientTime(clock.Now))
	require.NoError(t, err)

	key := uniqueKey(t)
	r := contract.Request{Limits: []contract.Limit{lim(100, time.Second), paced(10, time.Second, 1)}, Cost: 1}
	require.True(t, reserve(t, s, key, r).Allowed)
	require.NoError(t, s.InjectPace(key, clock.Now().Add(time.Hour).UnixMicro()))
	clock.Advance(time.Second)
	require.True(t, reserve(t, s, key, r).Allowed)
	pk := s.RedisKey(key) + ":pace"
	assert.Greater(t, c.PTTL(ctx, pk).Val(), time.Duration(0), "the paced time has a TTL")
	assert.Less(t, c.PTTL(ctx, pk).Val(), time.Minute)

	key = uniqueKey(t)
	require.NoError(t, s.InjectEntry(key, clock.Now().UnixMicro()))
	require.Equal(t, time.Duration(-1), c.PTTL(ctx, s.RedisKey(key)).Val(), "the outside RPUSH left no TTL")
	clock.Advance(time.Second)
	for range 3 {
		require.True(t, reserve(t, s, key, req(1, 0, lim(100, time.Second))).Allowed)
	}
	assert.Greater(t, c.PTTL(ctx, s.RedisKey(key)).Val(), time.Duration(0), "the log has a TTL")
}

// TestScriptsKnowMaxAllowance: the scripts' horizon (prelude.lua's
// implausible) writes MaxAllowance in microseconds as a number.
func TestScriptsKnowMaxAllowance(t *testing.T) {
	us := strconv.FormatInt(contract.MaxAllowance.Microseconds(), 10)
	for _, name := range []string{"reserve log", "reserve paced", "reserve log+also"} {
		assert.Contains(t, redisstore.Scripts()[name], "max_wait + "+us+" + span", name)
	}
}
