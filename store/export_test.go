package store

import (
	"context"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/throttle-go/throttle/internal/contract"
)

// Accessors for the store's own tests (package store_test): the Redis key
// layout, the number of keys a Memory store holds, and what a reservation
// recorded.

// RedisKey is the name of the Redis key that holds the log of a rate key.
func (r *Redis) RedisKey(key string) string { return r.logKey(key) }

// RedisKeyFor is the name of the Redis key that holds the state of a rate
// key under alg.
func (r *Redis) RedisKeyFor(key string, alg contract.Algorithm) string { return r.keyFor(key, alg) }

// FeedbackKey is the name of the Redis key that holds what the upstream said
// about a rate key.
func (r *Redis) FeedbackKey(key string) string { return r.feedbackKey(key) }

// Len returns the number of keys the store holds, expired ones not yet
// dropped included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.logs) + len(m.counters)
}

// SetEvictionClock replaces the clock of the eviction check's recheck.
func (r *Redis) SetEvictionClock(now func() time.Time) { r.evict.now = now }

// InjectEntry appends an entry at (µs) to key's log, as another program's
// RPUSH would: a log it makes has no expiry.
func (m *Memory) InjectEntry(key string, at int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lg := m.logs[key]
	if lg == nil {
		lg = &memLog{expires: math.MaxInt64}
		m.logs[key] = lg
	}
	lg.times = append(lg.times, at)
	return nil
}

// InjectPace sets key's paced time to tat (µs) without an expiry, as
// another program's SET would.
func (m *Memory) InjectPace(key string, tat int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paces == nil {
		m.paces = make(map[string]*memPace)
	}
	m.paces[key] = &memPace{tat: tat, expires: math.MaxInt64}
	return nil
}

// InjectEntry is RPUSH of at (µs) to key's log.
func (r *Redis) InjectEntry(key string, at int64) error {
	return r.client.(redis.Cmdable).RPush(context.Background(), r.logKey(key), at).Err()
}

// InjectPace is SET of key's paced time to tat (µs), without a TTL.
func (r *Redis) InjectPace(key string, tat int64) error {
	return r.client.(redis.Cmdable).Set(context.Background(), r.paceKey(key), tat, 0).Err()
}
