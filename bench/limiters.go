package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// A limiter is one way its users ask Redis "may I send one request under
// this key now?". decide answers, with the wait its algorithm suggests when it
// refuses (0 when it gives none: its users poll). throttle's answer may also be
// "yes, after delay": it reserved a slot in the future.
type limiter struct {
	name  string
	about string
	// decide asks for one unit under key; delay > 0 with allowed means
	// "send after delay" (throttle in wait mode only).
	decide func(ctx context.Context, key string) (allowed bool, delay, retry time.Duration, err error)
	// logKey returns the Redis key holding the state of a rate key, for
	// MEMORY USAGE; several for algorithms with more than one.
	logKeys func(key string) []string
}

// The kinds of limiter, in the order of the tables.
const (
	kThrottle   = "throttle"
	kThrottleB  = "throttle, batched"
	kRedisRate  = "redis_rate"
	kRedisRate1 = "redis_rate burst 1"
	kUlule      = "ulule/limiter"
	kSeed004    = "sorted-set log in Lua (by hand)"
	kSeed000    = "MULTI sorted set (by hand)"
	kSeed003    = "sliding counter (by hand)"
)

var redisKinds = []string{kThrottle, kRedisRate, kRedisRate1, kUlule, kSeed004, kSeed000, kSeed003}

// decisionKinds are the limiters of the decision rows: redisKinds, with
// throttle's batched store after throttle.
func decisionKinds() []string {
	return append([]string{kThrottle, kThrottleB}, redisKinds[1:]...)
}

var abouts = map[string]string{
	kThrottle:   "throttle's store.NewRedis(client).Reserve: one EVALSHA of the log script (store/internal/script), reservation sliding log in a LIST, server clock",
	kThrottleB:  "the same store with store.WithBatching(64): reservations made while two batches are on their way go together in the next pipeline (one script call each); a lone call goes at once",
	kRedisRate:  "github.com/go-redis/redis_rate/v10 Allow, GCRA, Limit{Rate: N, Period: W, Burst: N} (what PerSecond(N) gives)",
	kRedisRate1: "redis_rate Allow with Burst 1: requests evenly spaced W/N apart",
	kUlule:      "github.com/ulule/limiter/v3 with its Redis store: fixed window, INCRBY + PEXPIRE in a script",
	kSeed004:    "a common hand-written design: Lua over a sorted set (ZREMRANGEBYSCORE, ZCARD, ZADD, EXPIRE), client clock in ns, sent with EVAL each call",
	kSeed000:    "a common hand-written design: MULTI ZREMRANGEBYSCORE, ZRANGE 0 -1, ZADD, EXPIRE EXEC; the ZADD runs whether or not the call is allowed",
	kSeed003:    "a common hand-written design: GET previous interval, INCR current (+ EXPIRE), in one pipeline; estimate = prev·(1−elapsed) + current",
}

// newLimiter returns a limiter of the given kind allowing n per w. maxWait
// applies to throttle only (0: fail fast).
func newLimiter(ctx context.Context, kind string, rdb *redis.Client, n int, w, maxWait time.Duration) (*limiter, error) {
	l := &limiter{name: kind, about: abouts[kind]}
	switch kind {
	case kThrottle, kThrottleB:
		var opts []store.RedisOption
		if kind == kThrottleB {
			opts = append(opts, store.WithBatching(64))
		}
		st, err := store.NewRedis(rdb, opts...)
		if err != nil {
			return nil, err
		}
		req := contract.Request{Limits: []contract.Limit{{N: n, Per: w}}, Cost: 1, MaxWait: maxWait}
		l.decide = func(ctx context.Context, key string) (bool, time.Duration, time.Duration, error) {
			r, err := st.Reserve(ctx, key, req)
			return r.Allowed, r.Delay, r.RetryAfter, err
		}
		// The log's key, as store.NewRedis documents it: prefix + "{" + key + "}".
		l.logKeys = func(key string) []string { return []string{store.DefaultPrefix + "{" + key + "}"} }
	case kRedisRate, kRedisRate1:
		rl := redis_rate.NewLimiter(rdb)
		lim := redis_rate.Limit{Rate: n, Period: w, Burst: n}
		if kind == kRedisRate1 {
			lim.Burst = 1
		}
		l.decide = func(ctx context.Context, key string) (bool, time.Duration, time.Duration, error) {
			r, err := rl.Allow(ctx, key, lim)
			if err != nil {
				return false, 0, 0, err
			}
			return r.Allowed > 0, 0, max(r.RetryAfter, 0), nil
		}
		l.logKeys = func(key string) []string { return []string{"rate:" + key} }
	case kUlule:
		st, err := ulredis.NewStoreWithOptions(rdb, ulule.StoreOptions{Prefix: "ulule"})
		if err != nil {
			return nil, err
		}
		lim := ulule.New(st, ulule.Rate{Period: w, Limit: int64(n)})
		l.decide = func(ctx context.Context, key string) (bool, time.Duration, time.Duration, error) {
			c, err := lim.Get(ctx, key)
			if err != nil {
				return false, 0, 0, err
			}
			return !c.Reached, 0, max(time.Until(time.Unix(c.Reset, 0)), 0), nil
		}
		l.logKeys = func(key string) []string { return []string{"ulule:" + key} }
	case kSeed004:
		l.decide = func(ctx context.Context, key string) (bool, time.Duration, time.Duration, error) {
			return seed004(ctx, rdb, key, time.Now().UnixNano(), int64(w), n)
		}
		l.logKeys = func(key string) []string { return []string{key} }
	case kSeed000:
		l.decide = func(ctx context.Context, key string) (bool, time.Duration, time.Duration, error) {
			return seed000(ctx, rdb, key, time.Now(), w, n)
		}
		l.logKeys = func(key string) []string { return []string{key} }
	case kSeed003:
		l.decide = func(ctx context.Context, key string) (bool, time.Duration, time.Duration, error) {
			return seed003(ctx, rdb, key, time.Now(), w, n)
		}
		l.logKeys = func(key string) []string {
			cur := time.Now().UnixNano() / int64(w)
			return []string{seed003Key(key, cur-1), seed003Key(key, cur)}
		}
	default:
		return nil, fmt.Errorf("unknown limiter %q", kind)
	}
	return l, nil
}

// seed004Script is the sliding log of seed 004, written anew from the
// article's description: trim what left the window, count, add the call's
// time only when under the limit, refresh the expiry, return limit - count.
// The article passes the window in nanoseconds and EXPIREs the key with it
// as seconds (a TTL of about 31 years for a one-second window); kept, since
// that is what its users run.
const seed004Script = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
local count = redis.call('ZCARD', key)
if count < limit then
  redis.call('ZADD', key, now, now)
end
redis.call('EXPIRE', key, window)
return limit - count
`

// seed004 runs the script the way the article does: rdb.Eval with the
// script's text on every call, the client's clock in nanoseconds.
func seed004(ctx context.Context, rdb redis.Scripter, key string, nowNs, windowNs int64, n int) (bool, time.Duration, time.Duration, error) {
	v, err := rdb.Eval(ctx, seed004Script, []string{key}, nowNs, windowNs, n).Int64()
	if err != nil {
		return false, 0, 0, err
	}
	return v > 0, 0, 0, nil
}

// seed000 is the transaction of seed 000: in one MULTI/EXEC, drop what left
// the window, read the whole window, add this call (allowed or not: the bug
// the article's readers inherit), refresh the expiry in seconds. The time is
// the client's, in seconds as a float (PHP's microtime(true)).
func seed000(ctx context.Context, rdb redis.Cmdable, key string, now time.Time, w time.Duration, n int) (bool, time.Duration, time.Duration, error) {
	t := float64(now.UnixMicro()) / 1e6
	var window *redis.StringSliceCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, key, "0", strconv.FormatFloat(t-w.Seconds(), 'f', -1, 64))
		window = p.ZRange(ctx, key, 0, -1)
		p.ZAdd(ctx, key, redis.Z{Score: t, Member: t})
		p.Expire(ctx, key, w)
		return nil
	})
	if err != nil {
		return false, 0, 0, err
	}
	remaining := max(0, n-len(window.Val()))
	return remaining > 0, 0, 0, nil
}

func seed003Key(key string, interval int64) string {
	return key + "-" + strconv.FormatInt(interval, 10)
}

// seed003 is the sliding-window counter of seed 003: GET the previous
// interval's count, INCR the current one (every call counts, allowed or
// not), weight the previous count by the share of the interval still ahead.
// The article sets no expiry; its users need one, so the pipeline adds
// EXPIRE of two intervals.
func seed003(ctx context.Context, rdb redis.Cmdable, key string, now time.Time, w time.Duration, n int) (bool, time.Duration, time.Duration, error) {
	ns := now.UnixNano()
	cur := ns / int64(w)
	elapsed := float64(ns%int64(w)) / float64(w)
	var prev *redis.StringCmd
	var incr *redis.IntCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		prev = p.Get(ctx, seed003Key(key, cur-1))
		incr = p.Incr(ctx, seed003Key(key, cur))
		p.Expire(ctx, seed003Key(key, cur), 2*w)
		return nil
	})
	if err != nil && err != redis.Nil {
		return false, 0, 0, err
	}
	p, _ := prev.Int64() // redis.Nil: 0
	count := float64(p)*(1-elapsed) + float64(incr.Val())
	return count <= float64(n), 0, 0, nil
}
