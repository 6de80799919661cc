package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrEvictingPolicy is matched, with errors.Is, by the error of every Reserve
// of a Redis store under EvictionRefuse (the default) while the server, or
// a master of the Cluster, has a memory limit and a maxmemory-policy that
// may evict the store's keys. To the throttle Transport it is a store
// failure, handled by its failure policy (by default, fail closed: nothing is
// sent).
//
// Why refuse: an evicted log forgets the requests it counted, so the fleet
// sends them again and the upstream answers 429, a storm that nothing else
// would explain. Set maxmemory-policy noeviction on the server (a full
// server then answers writes with an OOM error, which the store reports as
// it is), or choose EvictionWarn or EvictionOff with WithEvictionCheck.
var ErrEvictingPolicy = errors.New("store: the Redis maxmemory-policy may evict the store's keys")

// EvictionCheck is what a Redis store does when it finds that the server may
// evict its keys (see WithEvictionCheck).
type EvictionCheck uint8

const (
	// EvictionRefuse fails every Reserve with an error matching
	// ErrEvictingPolicy while the server may evict the store's keys. It is
	// the default.
	EvictionRefuse EvictionCheck = iota
	// EvictionWarn logs a warning on the logger of WithLogger at each check
	// that finds an evicting policy, and goes on.
	EvictionWarn
	// EvictionOff does not check.
	EvictionOff
)

var evictionCheckNames = [...]string{"EvictionRefuse", "EvictionWarn", "EvictionOff"}

func (c EvictionCheck) String() string {
	if int(c) < len(evictionCheckNames) {
		return evictionCheckNames[c]
	}
	return fmt.Sprintf("EvictionCheck(%d)", uint8(c))
}

// EvictionRecheck is how long a Redis store trusts the answer of its eviction
// check before it checks again, in the call path of one Reserve (the others
// go on with the answer they have).
const EvictionRecheck = 5 * time.Minute

// WithEvictionCheck says what the store does when the server may evict its
// keys: a memory limit (maxmemory above 0) with a maxmemory-policy other than
// noeviction (allkeys-* and volatile-*: the store's keys have TTLs, so both
// kinds evict them).
//
// The store checks at the first Reserve, never in NewRedis, and again at most
// every EvictionRecheck, on every master of a Cluster: CONFIG GET maxmemory*,
// or INFO memory where CONFIG is denied (an ACL, a managed Redis). Concurrent
// first calls wait for the first check; later checks add nothing to any call
// but the one that makes them. A check that gets no answer (the server is
// down) decides nothing and is made again at the next call. When neither
// command is allowed, the policy cannot be known and the check passes (under
// EvictionWarn it says so): grant the store's user +info (see docs/redis.md).
func WithEvictionCheck(c EvictionCheck) RedisOption {
	return func(r *Redis) error {
		if c > EvictionOff {
			return fmt.Errorf("store: WithEvictionCheck(%s): unknown check", c)
		}
		r.evictCheck = c
		return nil
	}
}

// eviction is the state of the eviction check.
type eviction struct {
	last     atomic.Pointer[evictionVerdict] // nil until a check got an answer
	checking atomic.Bool
	first    chan struct{} // closed when the first check has ended
	once     sync.Once
	// now is the wall clock (the recheck interval is no part of any
	// limit); tests replace it.
	now func() time.Time
}

// evictionVerdict is the answer of one check.
type evictionVerdict struct {
	at  time.Time
	err error // nil: the keys are safe, or the policy cannot be known
}

// evictionGate returns the error of the latest check (nil when the keys are
// safe), checking first when no check has answered yet or the answer is
// older than EvictionRecheck. One caller checks at a time, holding no lock:
// the others use the previous answer or, before the first, wait for it.
func (r *Redis) evictionGate(ctx context.Context) error {
	if r.evictCheck == EvictionOff {
		return nil
	}
	e := &r.evict
	v := e.last.Load()
	if v != nil && e.now().Sub(v.at) < EvictionRecheck {
		return v.err
	}
	if !e.checking.CompareAndSwap(false, true) {
		if v != nil {
			return v.err
		}
		select { // the first check: wait for it
		case <-e.first:
		case <-ctx.Done():
			return ctx.Err()
		}
		if v = e.last.Load(); v != nil {
			return v.err
		}
		return nil // the first check got no answer: the call finds out itself
	}
	defer func() {
		e.checking.Store(false)
		e.once.Do(func() { close(e.first) })
	}()
	answered, verdict, failure := r.checkEviction(ctx)
	if !answered {
		if isAuthError(failure) {
			// Say what is wrong rather than what a script meets next
			// (an unauthenticated connection is closed on a long command).
			return fmt.Errorf("store: redis: %w", failure)
		}
		if v != nil {
			return v.err
		}
		return nil
	}
	e.last.Store(&evictionVerdict{at: e.now(), err: verdict})
	return verdict
}

// nodeCmds is what the check needs of a client of one server.
type nodeCmds interface {
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
	Info(ctx context.Context, section ...string) *redis.StringCmd
}

// checkEviction asks every master. It reports whether every master
// answered, and returns ErrEvictingPolicy, wrapped, when one may evict (under
// EvictionRefuse; EvictionWarn logs it and returns nil), or else the failure
// of a master that did not answer.
func (r *Redis) checkEviction(ctx context.Context) (answered bool, verdict, failure error) {
	var (
		mu       sync.Mutex
		evicting []string // "addr: policy"
		unknown  []string
		silent   error
	)
	check := func(ctx context.Context, name string, c nodeCmds) error {
		p, known, err := evictionPolicy(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			silent = err
		case !known:
			unknown = append(unknown, name)
		case p != "":
			evicting = append(evicting, name+p)
		}
		return nil
	}
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return check(ctx, n.Options().Addr+": ", n)
		}); err != nil {
			return false, nil, err
		}
	case *redis.Ring:
		if err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			return check(ctx, n.Options().Addr+": ", n)
		}); err != nil {
			return false, nil, err
		}
	case nodeCmds:
		_ = check(ctx, "", c)
	default:
		return true, nil, nil // a client that cannot be asked: nothing to know
	}
	if silent != nil {
		return false, nil, silent
	}
	if len(unknown) > 0 && r.evictCheck == EvictionWarn && r.logger != nil {
		r.logger.WarnContext(ctx, "throttle: cannot read the Redis maxmemory-policy (CONFIG GET and INFO denied): the store's keys may be evicted unnoticed",
			"nodes", strings.Join(unknown, ", "))
	}
	if len(evicting) == 0 {
		return true, nil, nil
	}
	err := fmt.Errorf("%w: %s (set maxmemory-policy noeviction, or see WithEvictionCheck)", ErrEvictingPolicy, strings.Join(evicting, "; "))
	if r.evictCheck == EvictionWarn {
		if r.logger != nil {
			r.logger.WarnContext(ctx, "throttle: "+err.Error())
		}
		return true, nil, nil
	}
	return true, err, nil
}

// evictionPolicy returns the maxmemory-policy of one server as
// "maxmemory-policy <name> with maxmemory <bytes>" when it may evict, "" when
// it may not; known is false when neither CONFIG GET nor INFO was allowed,
// and err is set when the server did not answer.
func evictionPolicy(ctx context.Context, c nodeCmds) (evicting string, known bool, err error) {
	var policy, limit string
	cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
	var reply redis.Error
	switch {
	case isAuthError(err):
		return "", false, err
	case err == nil:
		policy, limit = cfg["maxmemory-policy"], cfg["maxmemory"]
	case !errors.As(err, &reply):
		return "", false, err
	default:
		// Denied (NOPERM, a managed Redis that renames CONFIG): INFO says
		// the same.
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			if errors.As(err, &reply) {
				return "", false, nil
			}
			return "", false, err
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			switch k {
			case "maxmemory_policy":
				policy = v
			case "maxmemory":
				limit = v
			}
		}
	}
	if policy == "" {
		return "", false, nil
	}
	if policy == "noeviction" {
		return "", true, nil
	}
	if n, err := strconv.ParseInt(limit, 10, 64); err == nil && n == 0 {
		return "", true, nil // no memory limit: nothing is ever evicted
	}
	return fmt.Sprintf("maxmemory-policy %s with maxmemory %s", policy, limit), true, nil
}

// isAuthError reports whether err is the server's refusal of the client's
// credentials, or of a client that gave none.
func isAuthError(err error) bool {
	return redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS")
}
