package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
)

// The leases and queue of a key, read for the operator's tools
// (contract.LeaseInspector) in plain read-only commands: the ZSET
// ":lease" of lease ids scored by their expiry (µs) and the LIST ":lq" of
// waiters, "deadline id inbox" (see lease.lua). Nothing is reclaimed or
// handed over: an expired lease or waiter is left to the next script, and
// not counted.

var _ contract.LeaseInspector = (*Redis)(nil)

// LeaseUsage implements contract.LeaseInspector: the time (the store's
// clock, else the server's TIME), then one pipeline.
func (r *Redis) LeaseUsage(ctx context.Context, key string) (contract.LeaseUsage, error) {
	if key == "" {
		return contract.LeaseUsage{}, fmt.Errorf("%w: empty key", contract.ErrInvalidRequest)
	}
	c, err := r.cmdable("lease usage")
	if err != nil {
		return contract.LeaseUsage{}, err
	}
	var now int64
	if r.clock != nil {
		now = r.clock().UnixMicro()
	} else {
		t, err := c.Time(ctx).Result()
		if err != nil {
			return contract.LeaseUsage{}, fmt.Errorf("store: redis lease usage: %w", err)
		}
		now = t.UnixMicro()
	}
	lk, qk, _ := r.leaseKeys(key)
	after := "(" + strconv.FormatInt(now, 10)
	var held *redis.IntCmd
	var first *redis.ZSliceCmd
	var queue *redis.StringSliceCmd
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		held = p.ZCount(ctx, lk, after, "+inf")
		first = p.ZRangeByScoreWithScores(ctx, lk, &redis.ZRangeBy{Min: after, Max: "+inf", Count: 1})
		queue = p.LRange(ctx, qk, 0, contract.MaxQueueRead)
		return nil
	})
	if err != nil {
		return contract.LeaseUsage{}, fmt.Errorf("store: redis lease usage: %w", err)
	}
	u := contract.LeaseUsage{Held: int(held.Val())}
	if z := first.Val(); len(z) > 0 {
		u.Earliest = time.Duration(int64(z[0].Score)-now) * time.Microsecond
	}
	q := queue.Val()
	if len(q) > contract.MaxQueueRead {
		q, u.QueueMore = q[:contract.MaxQueueRead], true
	}
	for _, w := range q {
		d, _, _ := strings.Cut(w, " ")
		if deadline, err := strconv.ParseInt(d, 10, 64); err == nil && deadline > now {
			u.Queued++
		}
	}
	return u, nil
}
