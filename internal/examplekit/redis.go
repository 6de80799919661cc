package examplekit

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/store"
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

// StartRedis returns a Redis: with one address, the server there; with one
// URL (redis://, rediss://, redis-sentinel://, redis-cluster://: see
// store.NewRedisURL), the server or servers it names; with several
// addresses, the Redis Cluster whose nodes they are; with none, an embedded
// in-memory Redis (miniredis) started on loopback, which Close stops. It
// checks that the server answers, within 5 seconds or before ctx ends, so
// that a wrong address fails at once with a clear error. Neither its errors
// nor String contain a password.
func StartRedis(ctx context.Context, addrs ...string) (*Redis, error) {
	r := &Redis{desc: "Redis at "}
	switch {
	case len(addrs) == 1 && strings.Contains(addrs[0], "://"):
		_, c, err := store.NewRedisURL(addrs[0])
		if err != nil {
			return nil, fmt.Errorf("examplekit: %w", err)
		}
		r.Client, r.desc = c, "Redis at "+withoutUserinfo(addrs[0])
		return r, r.ping(ctx)
	case len(addrs) == 0:
		m, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("examplekit: starting the embedded Redis: %w", err)
		}
		r.mini, r.desc, addrs = m, "embedded Redis at ", []string{m.Addr()}
	case len(addrs) > 1:
		r.desc = "Redis Cluster at "
	}
	r.desc += strings.Join(addrs, ",")
	// One address gives a *redis.Client, several a *redis.ClusterClient.
	r.Client = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
	return r, r.ping(ctx)
}

// ping checks that the server answers; it closes r when it does not.
func (r *Redis) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.Client.Ping(ctx).Err(); err != nil {
		r.Close()
		return fmt.Errorf("examplekit: %s does not answer: %w", r.desc, err)
	}
	return nil
}

// withoutUserinfo is a URL for a log: its scheme and host, never its user
// or password.
func withoutUserinfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Scheme + "://" + u.Host
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
