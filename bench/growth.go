package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The growth rows: the cost of one decision on a key whose log already holds
// L live entries, for the two logs (throttle's LIST, a hand-written sorted-set log).
// The limit is L per hour and the entries are spread over the last minute,
// so all are live:
//
//   - full: the limit is L, so each decision is refused and the log stays at
//     L (a saturated key in fail-fast mode);
//   - admitted: the limit is L plus a batch, so each decision is admitted
//     and appended (the key of a busy fleet); the decisions come in batches
//     of growthBatch, the entries they appended removed after each, so the
//     log holds between L and L + growthBatch.
var growthSizes = []int{100, 5_000, 100_000}

const growthWindow = time.Hour

type growthResult struct {
	kind     string
	size     int
	mode     string // "full" or "admitted"
	p50      time.Duration
	cpuUS    float64
	scriptUS float64 // commandstats µs of the script call (EVALSHA, EVAL) per decision
	cmds     float64
	bytesPE  float64 // MEMORY USAGE / entries at the start, "full" only
}

// prefill writes size live entries, spread over the last minute, into the
// log of kind under key, and returns the number the server reports.
func prefill(ctx context.Context, rdb *redis.Client, kind, redisKey string, size int) (int64, error) {
	if err := rdb.Del(ctx, redisKey).Err(); err != nil {
		return 0, err
	}
	now := time.Now()
	step := time.Minute / time.Duration(size)
	for lo := 0; lo < size; lo += 1000 {
		hi := min(size, lo+1000)
		pipe := rdb.Pipeline()
		switch kind {
		case kThrottle: // microseconds, oldest first, like reserve.lua's slots
			vals := make([]any, 0, hi-lo)
			for i := lo; i < hi; i++ {
				vals = append(vals, now.Add(-time.Minute+time.Duration(i)*step).UnixMicro())
			}
			pipe.RPush(ctx, redisKey, vals...)
		case kSeed004: // nanoseconds as score and member, like the hand-written sorted-set log
			zs := make([]redis.Z, 0, hi-lo)
			for i := lo; i < hi; i++ {
				t := now.Add(-time.Minute + time.Duration(i)*step).UnixNano()
				zs = append(zs, redis.Z{Score: float64(t), Member: strconv.FormatInt(t, 10)})
			}
			pipe.ZAdd(ctx, redisKey, zs...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
	}
	if kind == kThrottle {
		if err := rdb.PExpire(ctx, redisKey, growthWindow).Err(); err != nil {
			return 0, err
		}
		return rdb.LLen(ctx, redisKey).Result()
	}
	return rdb.ZCard(ctx, redisKey).Result()
}

// growthBatch is the number of admitted decisions between two restorations
// of the log: a tenth of the smallest size.
const growthBatch = 10

// logLen is the number of entries in the log of kind.
func logLen(ctx context.Context, rdb *redis.Client, kind, redisKey string) (int64, error) {
	if kind == kThrottle {
		return rdb.LLen(ctx, redisKey).Result()
	}
	return rdb.ZCard(ctx, redisKey).Result()
}

func (e *env) growth(ctx context.Context, progress func(string)) ([]growthResult, error) {
	type gk struct {
		kind, mode string
		size       int
	}
	samples := map[gk][]sample{}
	bytes := map[gk]float64{}
	calls := e.cfg.growthCalls
	for rep := range e.cfg.reps {
		for _, kind := range []string{kThrottle, kSeed004} {
			for _, size := range growthSizes {
				for _, mode := range []string{"full", "admitted"} {
					if err := reset(ctx, e.rdb); err != nil {
						return nil, err
					}
					// Full: one run; the log stays at size. Admitted: batches
					// of growthBatch decisions, the entries they appended
					// removed after each, so that the log holds between size
					// and size + growthBatch whatever the size.
					batch, n := calls, size
					if mode == "admitted" {
						batch, n = growthBatch, size+growthBatch
					}
					l, err := newLimiter(ctx, kind, e.rdb, n, growthWindow, 0)
					if err != nil {
						return nil, err
					}
					rk := l.logKeys("grow")[0]
					want := mode == "admitted"
					op := func(ctx context.Context, _, _ int) error {
						ok, _, _, err := l.decide(ctx, "grow")
						if err == nil && ok != want {
							err = fmt.Errorf("%s with %d entries (%s): allowed=%v", kind, size, mode, ok)
						}
						return err
					}
					if _, err := prefill(ctx, e.rdb, kind, rk, size); err != nil {
						return nil, err
					}
					mem, err := e.rdb.MemoryUsage(ctx, rk, 0).Result()
					if err != nil {
						return nil, err
					}
					bytes[gk{kind, mode, size}] = float64(mem) / float64(size)
					var s sample
					for done := 0; done < calls; done += batch {
						if got, err := logLen(ctx, e.rdb, kind, rk); err != nil || got != int64(size) {
							return nil, fmt.Errorf("%s: the log holds %d entries, not %d (%v)", kind, got, size, err)
						}
						warm := 0
						if mode == "full" {
							warm = 20 // refused: the log does not grow
						}
						b, err := e.runWarm(ctx, 1, 0, min(batch, calls-done), warm, op)
						if err != nil {
							return nil, err
						}
						s = s.add(b)
						if mode == "admitted" { // drop what the batch appended
							if kind == kThrottle {
								err = e.rdb.RPopCount(ctx, rk, b.n).Err()
							} else {
								err = e.rdb.ZRemRangeByRank(ctx, rk, int64(-b.n), -1).Err()
							}
							if err != nil {
								return nil, err
							}
						}
					}
					samples[gk{kind, mode, size}] = append(samples[gk{kind, mode, size}], s)
					progress(fmt.Sprintf("growth rep %d/%d: %-28s %7d entries %-8s p50 %6.1fµs script %6.1fµs cpu %6.1fµs", rep+1, e.cfg.reps, kind, size, mode, us(s.pct(.5)), s.scriptPerCall(), s.cpuPerCall()))
				}
			}
		}
	}
	var out []growthResult
	for _, kind := range []string{kThrottle, kSeed004} {
		for _, mode := range []string{"full", "admitted"} {
			for _, size := range growthSizes {
				ss := samples[gk{kind, mode, size}]
				out = append(out, growthResult{
					kind: kind, size: size, mode: mode,
					p50:      time.Duration(median(ss, func(s sample) float64 { return float64(s.pct(.5)) })),
					cpuUS:    median(ss, sample.cpuPerCall),
					scriptUS: median(ss, sample.scriptPerCall),
					cmds:     median(ss, sample.cmdsPerCall),
					bytesPE:  bytes[gk{kind, "full", size}],
				})
			}
		}
	}
	return out, nil
}

// memoryResult is what one limiter keeps in Redis for one busy key.
type memoryResult struct {
	kind    string
	entries int64 // entries in the log; 0 for counters
	bytes   int64 // MEMORY USAGE of its keys
}

// memory makes memCalls admitted decisions on one key with each limiter,
// then asks the server what its keys hold.
func (e *env) memory(ctx context.Context) ([]memoryResult, error) {
	const memCalls = 5000
	var out []memoryResult
	for _, kind := range redisKinds {
		if err := reset(ctx, e.rdb); err != nil {
			return nil, err
		}
		l, err := newLimiter(ctx, kind, e.rdb, 1_000_000_000, growthWindow, 0)
		if err != nil {
			return nil, err
		}
		for range memCalls {
			if ok, _, _, err := l.decide(ctx, "mem"); err != nil || !ok {
				return nil, fmt.Errorf("%s: memory row: allowed=%v err=%v", kind, ok, err)
			}
		}
		r := memoryResult{kind: kind}
		for _, k := range l.logKeys("mem") {
			typ, err := e.rdb.Type(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			switch typ {
			case "none":
				continue
			case "list":
				r.entries, err = e.rdb.LLen(ctx, k).Result()
			case "zset":
				r.entries, err = e.rdb.ZCard(ctx, k).Result()
			}
			if err != nil {
				return nil, err
			}
			b, err := e.rdb.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				return nil, err
			}
			r.bytes += b
		}
		if (kind == kThrottle || kind == kSeed004 || kind == kSeed000) && r.entries != memCalls {
			return nil, fmt.Errorf("%s: %d entries after %d admitted decisions", kind, r.entries, memCalls)
		}
		out = append(out, r)
	}
	return out, nil
}
