package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
)

// Accessors for the stores' tests (package store_test, beside the
// conformance suite): the Redis key layout, and state written as another
// program would. Nothing else calls them.

// RedisKey is the name of the Redis key that holds the log of a rate key.
func (r *Redis) RedisKey(key string) string { return r.logKey(key) }

// RedisKeyFor is the name of the Redis key that holds the state of a rate
// key under alg.
func (r *Redis) RedisKeyFor(key string, alg contract.Algorithm) string { return r.keyFor(key, alg) }

// FeedbackKey is the name of the Redis key that holds what the upstream said
// about a rate key.
func (r *Redis) FeedbackKey(key string) string { return r.feedbackKey(key) }

// SetEvictionClock replaces the clock of the eviction check's recheck.
func (r *Redis) SetEvictionClock(now func() time.Time) { r.evict.now = now }

// InjectEntry is RPUSH of at (µs) to key's log.
func (r *Redis) InjectEntry(key string, at int64) error {
	return r.client.(redis.Cmdable).RPush(context.Background(), r.logKey(key), at).Err()
}

// InjectPace is SET of key's paced time to tat (µs), without a TTL.
func (r *Redis) InjectPace(key string, tat int64) error {
	return r.client.(redis.Cmdable).Set(context.Background(), r.paceKey(key), tat, 0).Err()
}

// ActiveTenants is ZCARD of key's set of active tenants, less its virtual
// time.
func (r *Redis) ActiveTenants(key string) (int, error) {
	n, err := r.client.(redis.Cmdable).ZCard(context.Background(), r.tenantsKey(key)).Result()
	return max(int(n)-1, 0), err
}
