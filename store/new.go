package store

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/store/internal/memstore"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

// This file is the public face of the two backends
// (store/internal/redisstore, store/internal/memstore): their constructors,
// options, bounds and errors. Everything else they share is the internal
// contract (internal/contract).

// NewRedis returns a Redis store on client, which may be a *redis.Client, a
// *redis.ClusterClient, a *redis.Ring, a Sentinel failover client or any
// redis.UniversalClient. It does no I/O: the first Reserve checks that the
// server will not evict the store's keys (see WithEvictionCheck; by default
// every Reserve fails while it may). To a *redis.Client it adds a hook that
// sees its dials, so that a refused connection fails the store's calls at
// once rather than after go-redis's retries; it changes nothing else.
//
// The store is shared by every process that uses the same server or
// cluster: one script call per Reserve, waiting included. Time is read inside
// the scripts with TIME, so the clocks of the clients do not matter; only
// durations travel back.
//
// Key layout, for a rate key k and the prefix p (DefaultPrefix unless
// WithPrefix):
//
//	p{k}          LIST: the SlidingLog's send times
//	p{k}:pace     STRING: a paced limit's theoretical arrival time
//	p{k}:fixed    HASH: FixedWindow's counters (":counter", ":buckets" alike)
//	p{k}:p        HASH: what the upstream said (pauses, learned limits)
//
// and, outside any rate key's braces, the rules each process publishes for
// the operator's tools: p + "rules" (HASH: process → expiry) and
// p + "rules:" + process (STRING, with a TTL).
//
// The braces make k its own Cluster hash tag, so all of a rate key's Redis
// keys land in the same slot. A rate key that starts with its own hash tag,
// "{tag}rest", is used as it is (p{tag}rest, p{tag}rest:pace, ...), so that
// the keys of one request (throttle's Rule.Also) can share a slot.
func NewRedis(client redis.Scripter, opts ...RedisOption) (Store, error) {
	r, err := redisstore.NewRedis(client, redisOptions(opts)...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// NewRedisURL returns a Redis store on a client it makes from rawURL, and
// that client, to ping at start-up (its Ping; the user of ACLRule may) and
// to close when the store is no longer used. It does no I/O. The URL says
// which client:
//
//	redis://[user:password@]host:port[/db][?options]            one server
//	rediss://...                                                the same over TLS
//	redis-sentinel://[user:password@]host:port[/db]?master_name=mymaster[&addr=host2:port2][&password=...]
//	rediss-sentinel://...                                       Sentinel, TLS to every node
//	redis-cluster://[user:password@]host:port[?addr=host2:port2...]
//	rediss-cluster://...                                        a Cluster over TLS
//	unix://[user:password@]/path/to/redis.sock[?db=N]
//
// The options are go-redis's (redis.ParseURL, redis.ParseFailoverURL,
// redis.ParseClusterURL): dial_timeout, read_timeout, pool_size, and so on;
// dialer_retries and dialer_retry_timeout are taken by every scheme (go-redis
// takes them only for Sentinel and Cluster). In a Sentinel URL the userinfo authenticates to the Sentinels and the
// username and password options to the master. Options that would send the
// store's writes to a replica (replica_only, route_by_latency,
// route_randomly) are refused.
//
// rediss verifies the server's certificate against the system's roots; give
// WithTLSConfig for a private CA or a client certificate.
//
// No error it returns contains the password: the URL is never quoted, and
// what the parsers quote is left out.
func NewRedisURL(rawURL string, opts ...RedisOption) (Store, redis.UniversalClient, error) {
	r, c, err := redisstore.NewRedisURL(rawURL, redisOptions(opts)...)
	if err != nil {
		return nil, nil, err
	}
	return r, c, nil
}

// RedisOption configures NewRedis and NewRedisURL.
type RedisOption struct{ o redisstore.RedisOption }

// redisOptions unwraps opts (a zero RedisOption stays nil: NewRedis refuses it).
func redisOptions(opts []RedisOption) []redisstore.RedisOption {
	out := make([]redisstore.RedisOption, len(opts))
	for i, o := range opts {
		out[i] = o.o
	}
	return out
}

// WithPrefix replaces DefaultPrefix, e.g. to give two applications sharing a
// Redis their own logs. It may not contain braces, which would move the
// Cluster hash tag.
func WithPrefix(prefix string) RedisOption { return RedisOption{redisstore.WithPrefix(prefix)} }

// WithLogger gives the store a logger for what it should not keep silent and
// that is no caller's error: a rate key found in a wrong state and repaired
// (see KeyStateError), and, under EvictionWarn, an evicting policy. The
// store logs nothing without it. Nothing it logs contains a password.
func WithLogger(l *slog.Logger) RedisOption { return RedisOption{redisstore.WithLogger(l)} }

// WithClientTime makes the scripts use the given clock instead of the Redis
// server's TIME, for managed Redis that forbids TIME in scripts. Every client
// of a key must then have a synchronised clock: a client that is behind by d
// may send up to d early, and one that is ahead by d holds every other client
// of the key back by up to d (entries never go before the last one).
func WithClientTime(now func() time.Time) RedisOption {
	return RedisOption{redisstore.WithClientTime(now)}
}

// WithBatching makes concurrent reservations share round trips: a Reserve
// made while two batches are already on their way to Redis waits for one of
// them to come back, then goes with every other call that waited, as one
// pipeline of up to max script calls (group commit). A Reserve made while
// fewer are on their way is sent at once, so a lone caller waits for
// nothing. Each reservation is still its own script call, atomic on its own
// key; only the network round trip, and the server's and the client's work
// per round trip, are shared.
//
// A caller whose context ends while it waits returns at once with the
// context's error; if its reservation had already been sent and was
// granted, the store cancels it (in the background), as the Transport does
// for a waiter. Cancel and the feedback calls are not batched.
//
// Batching needs a client with pipelines (*redis.Client, *redis.ClusterClient,
// *redis.Ring, a failover client or any redis.UniversalClient; a
// ClusterClient splits each pipeline by node). It cannot be combined with
// WithReplicaAck, whose WAIT must follow each script on its own connection.
// max must be between 2 and 1024.
func WithBatching(max int) RedisOption { return RedisOption{redisstore.WithBatching(max)} }

// WithReplicaAck makes every reservation wait until at least replicas
// replicas of the key's master have acknowledged it (Redis WAIT), for at
// most timeout. Redis replicates asynchronously: without it, a master that
// crashes may lose its newest log entries, and a replica that takes over
// then admits up to that many extra requests once. With it, a reservation
// the caller was told about is on replicas+1 servers (in their memory: WAIT
// says nothing of disks).
//
// When fewer replicas acknowledge within timeout, Reserve returns an error
// matching ErrReplicaAck: to the Transport a store failure, handled by its
// failure policy (by default, fail closed: the request is not sent). The
// entries stay recorded on the master, so they count against the limit
// while the master lives, whether or not the request is sent.
//
// The script and WAIT must run on the connection of the key's master, so
// this option needs a *redis.Client (a single server, or a Sentinel failover
// client) or a *redis.ClusterClient; NewRedis refuses any other client.
// Cancel does not wait: removing entries only loosens the limit. Keep
// timeout below the client's ReadTimeout (3 s by default), which bounds the
// pipeline's reply.
func WithReplicaAck(replicas int, timeout time.Duration) RedisOption {
	return RedisOption{redisstore.WithReplicaAck(replicas, timeout)}
}

// WithEvictionCheck says what the store does when the server may evict its
// keys: a memory limit (maxmemory above 0) with a maxmemory-policy other than
// noeviction (allkeys-* and volatile-*: the store's keys have TTLs, so both
// kinds evict them).
//
// The store checks at the first Reserve, never in NewRedis, and again at most
// every 5 minutes, on every master of a Cluster: CONFIG GET maxmemory*,
// or INFO memory where CONFIG is denied (an ACL, a managed Redis). Concurrent
// first calls wait for the first check; later checks add nothing to any call
// but the one that makes them. A check that gets no answer (the server is
// down) decides nothing and is made again at the next call. When neither
// command is allowed, the policy cannot be known and the check passes (under
// EvictionWarn it says so): grant the store's user +info (see docs/redis.md).
func WithEvictionCheck(c EvictionCheck) RedisOption {
	return RedisOption{redisstore.WithEvictionCheck(redisstore.EvictionCheck(c))}
}

// WithTLSConfig is the TLS configuration of the client NewRedisURL makes
// (a private CA in RootCAs, a client certificate), for a rediss URL. Its
// ServerName defaults to the URL's host. NewRedis refuses it: configure the
// client given to NewRedis instead.
func WithTLSConfig(cfg *tls.Config) RedisOption { return RedisOption{redisstore.WithTLSConfig(cfg)} }

// NewMemory returns an empty Memory store: a Store in the memory of one
// process, with the semantics of Redis:
// the same slots and refusals (it trims old entries eagerly where the script
// trims a bounded number per call; that changes memory, not answers, except
// for a request with an Allowance on a clock that stepped back: see the trim
// in internal/script/log.lua). It is safe for concurrent use
// and starts no goroutine; expired keys are dropped lazily.
func NewMemory(opts ...MemoryOption) (Store, error) {
	o := make([]memstore.MemoryOption, len(opts))
	for i, opt := range opts {
		o[i] = opt.o
	}
	m, err := memstore.NewMemory(o...)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// MemoryOption configures NewMemory.
type MemoryOption struct{ o memstore.MemoryOption }

// WithClock replaces the clock of a Memory store, e.g. for tests. Without it,
// the store reads the monotonic clock (the wall time at NewMemory plus the
// time elapsed since), so steps of the wall clock do not move its slots.
func WithClock(now func() time.Time) MemoryOption { return MemoryOption{memstore.WithClock(now)} }

// DefaultPrefix starts the name of every Redis key the Redis store writes.
const DefaultPrefix = "throttle:"

// EvictionCheck is what a Redis store does when it finds that the server may
// evict its keys (see WithEvictionCheck).
type EvictionCheck uint8

const (
	// EvictionRefuse fails every Reserve with an error matching
	// ErrEvictingPolicy while the server may evict the store's keys. It is
	// the default.
	EvictionRefuse EvictionCheck = EvictionCheck(redisstore.EvictionRefuse)
	// EvictionWarn logs a warning on the logger of WithLogger at each check
	// that finds an evicting policy, and goes on.
	EvictionWarn EvictionCheck = EvictionCheck(redisstore.EvictionWarn)
	// EvictionOff does not check.
	EvictionOff EvictionCheck = EvictionCheck(redisstore.EvictionOff)
)

// String returns the name of c: "EvictionRefuse", "EvictionWarn" or
// "EvictionOff".
func (c EvictionCheck) String() string { return redisstore.EvictionCheck(c).String() }

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
var ErrEvictingPolicy = redisstore.ErrEvictingPolicy

// ErrReplicaAck is matched, with errors.Is, by the error of a reservation
// that fewer replicas acknowledged than WithReplicaAck asked for.
var ErrReplicaAck = redisstore.ErrReplicaAck

// ErrKeyState is matched, with errors.Is, by a *KeyStateError: the state of
// one rate key could not be read.
var ErrKeyState = redisstore.ErrKeyState

// KeyStateError says that the Redis keys of one rate key held something the
// store's scripts cannot read: a value of another type (another program
// wrote to a name under the store's prefix: WRONGTYPE), an entry that is not
// a number, or a time implausibly far in the future (see the log script's
// header). It is an error of that key's request only: the store itself
// answered, and every other key is unaffected. The throttle Transport
// returns it to the caller of that request and does not mark the store down.
//
// The Redis store repairs such a key when it meets one (it removes what its
// scripts cannot read: everything under its prefix is its own) and retries
// the call once, so a caller sees this error only when the repair or the
// retry failed too. The Memory store never returns it: nothing outside the
// process can write its state, and it repairs a time past the horizon (after
// its clock stepped back, say) as the Redis store does.
//
// Its fields: Key, the rate key; Reason, what was wrong and what the repair
// did; Err, the server's reply (joined with the repair's error, if any),
// which Unwrap returns.
type KeyStateError = redisstore.KeyStateError
