package throttletest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Redis is a Redis for a load test or a demo, and a client of it: the server
// the caller names, or an embedded one so that the same code runs without a
// server.
type Redis struct {
	// Client is a *redis.Client, or a *redis.ClusterClient for a Cluster.
	Client redis.UniversalClient

	desc string
	mini *miniredis.Miniredis
}

// StartRedis returns a Redis: with one address, the server there; with
// several, the Redis Cluster whose nodes they are; with none, an embedded
// in-memory Redis (miniredis) started on loopback, which Close stops. It
// checks that the server answers, within 5 seconds or before ctx ends, so
// that a wrong address fails at once with a clear error.
func StartRedis(ctx context.Context, addrs ...string) (*Redis, error) {
	r := &Redis{desc: "Redis at "}
	switch {
	case len(addrs) == 0:
		m, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("throttletest: starting the embedded Redis: %w", err)
		}
		r.mini, r.desc, addrs = m, "embedded Redis at ", []string{m.Addr()}
	case len(addrs) > 1:
		r.desc = "Redis Cluster at "
	}
	r.desc += strings.Join(addrs, ",")
	// One address gives a *redis.Client, several a *redis.ClusterClient.
	r.Client = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.Client.Ping(ctx).Err(); err != nil {
		r.Close()
		return nil, fmt.Errorf("throttletest: %s does not answer: %w", r.desc, err)
	}
	return r, nil
}

// String describes the server for a log: "Redis at …", "Redis Cluster at …"
// or "embedded Redis at …".
func (r *Redis) String() string { return r.desc }

// Close closes the client and stops the embedded Redis, if any.
func (r *Redis) Close() {
	_ = r.Client.Close()
	if r.mini != nil {
		r.mini.Close()
	}
}
