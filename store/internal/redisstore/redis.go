// Package redisstore is the Redis backend of store: one script call per
// reservation (the Lua of store/internal/script), feedback, leases, usage,
// the eviction check and a key's repair. The public store package builds it
// (store.NewRedis, store.NewRedisURL) and forwards its options; the
// conformance suite in store checks it against memstore.
package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
)

// DefaultPrefix starts the name of every Redis key the Redis store writes.
const DefaultPrefix = "throttle:"

// Redis is a Store in Redis, shared by every process that uses the same
// server or cluster: one script call per Reserve, waiting included. It is safe
// for concurrent use.
//
// Key layout, for a rate key k and the prefix p (DefaultPrefix unless
// WithPrefix):
//
//	p{k}          LIST: the SlidingLog's send times
//	p{k}:pace     STRING: a paced limit's theoretical arrival time
//	p{k}:fixed    HASH: FixedWindow's counters (":counter", ":buckets" alike)
//	p{k}:p        HASH: what the upstream said (Feedback)
//	p{k}:seen     STRING: the SlidingLog's seen mark: the log was written,
//	              with entries up to its value (lost state, write.lua)
//
// The braces make k its own Cluster hash tag, so all of a rate key's Redis
// keys land in the same slot. A rate key that starts with its own hash tag,
// "{tag}rest", is used as it is (p{tag}rest, p{tag}rest:pace, ...), so that
// the keys of one request (Request.Also) can share a slot. Time is read inside the scripts with TIME, so
// the clocks of the clients do not matter; only durations travel back.
type Redis struct {
	client redis.Scripter
	prefix string
	clock  func() time.Time // nil: the server's TIME
	// reloader is the client when it is a Cluster client (see failed).
	reloader interface{ ReloadState(context.Context) }
	// ackReplicas > 0 makes Reserve wait for that many replicas (see
	// WithReplicaAck).
	ackReplicas int
	ackTimeout  time.Duration
	// batch, if set, sends concurrent reservations together (WithBatching).
	batch *batcher
	// evictCheck and evict: the eviction check (eviction.go).
	evictCheck EvictionCheck
	evict      eviction
	// logger, if set, hears of repairs and evicting policies (WithLogger).
	logger *slog.Logger
	// tlsConfig is WithTLSConfig's, for NewRedisURL.
	tlsConfig *tls.Config
	// inboxes wake the waiters for a lease (lease.go).
	inboxes inboxes
	// refusals ends the calls in flight when a dial is refused (refused.go);
	// nil unless the client is a *redis.Client.
	refusals *refusals
	// trip is a recent round trip of a call in a reservation over several
	// Cluster slots, in nanoseconds (slots.go).
	trip atomic.Int64
	// rides are the overrides to read with the next reservation (ride.go),
	// in a pipeline of pipes: the client, when it has pipelines.
	rides rides
	pipes pipeliner
}

// ErrReplicaAck is matched, with errors.Is, by the error of a reservation
// that fewer replicas acknowledged than WithReplicaAck asked for.
var ErrReplicaAck = errors.New("store: too few replicas acknowledged the reservation")

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
	return func(r *Redis) error {
		if replicas < 1 {
			return fmt.Errorf("store: WithReplicaAck: %d replicas: must be at least 1", replicas)
		}
		if timeout < time.Millisecond {
			// WAIT counts in milliseconds, and 0 would block for ever.
			return fmt.Errorf("store: WithReplicaAck: timeout %s: must be at least 1ms", timeout)
		}
		r.ackReplicas, r.ackTimeout = replicas, timeout
		return nil
	}
}

// RedisOption configures NewRedis.
type RedisOption func(*Redis) error

// WithPrefix replaces DefaultPrefix, e.g. to give two applications sharing a
// Redis their own logs. It may not contain braces, which would move the
// Cluster hash tag.
func WithPrefix(prefix string) RedisOption {
	return func(r *Redis) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("store: WithPrefix(%q): braces would change the Cluster hash tag", prefix)
		}
		r.prefix = prefix
		return nil
	}
}

// WithLogger gives the store a logger for what it should not keep silent and
// that is no caller's error: a rate key found in a wrong state and repaired
// (see KeyStateError), and, under EvictionWarn, an evicting policy. The
// store logs nothing without it. Nothing it logs contains a password.
func WithLogger(l *slog.Logger) RedisOption {
	return func(r *Redis) error {
		if l == nil {
			return errors.New("store: WithLogger: nil logger")
		}
		r.logger = l
		return nil
	}
}

// WithClientTime makes the scripts use the given clock instead of the Redis
// server's TIME, for managed Redis that forbids TIME in scripts. Every client
// of a key must then have a synchronised clock: a client that is behind by d
// may send up to d early, and one that is ahead by d holds every other client
// of the key back by up to d (entries never go before the last one).
func WithClientTime(now func() time.Time) RedisOption {
	return func(r *Redis) error {
		if now == nil {
			return errors.New("store: WithClientTime: nil clock")
		}
		r.clock = now
		return nil
	}
}

// NewRedis returns a Redis store on client, which may be a *redis.Client, a
// *redis.ClusterClient, a *redis.Ring, a Sentinel failover client or any
// redis.UniversalClient. It does no I/O: the first Reserve checks that the
// server will not evict the store's keys (see WithEvictionCheck; by default
// every Reserve fails while it may). To a *redis.Client it adds a hook that
// sees its dials, so that a refused connection fails the store's calls at
// once rather than after go-redis's retries; it changes nothing else.
func NewRedis(client redis.Scripter, opts ...RedisOption) (*Redis, error) {
	return newRedis(client, opts, false)
}

// newRedis is NewRedis; fromURL allows WithTLSConfig (NewRedisURL).
func newRedis(client redis.Scripter, opts []RedisOption, fromURL bool) (*Redis, error) {
	if client == nil {
		return nil, errors.New("store: NewRedis: nil client")
	}
	// A typed nil, e.g. a (*redis.Client)(nil), would panic at request time.
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("store: NewRedis: nil client (%T)", client)
	}
	r := &Redis{client: client, prefix: DefaultPrefix}
	r.pipes, _ = client.(pipeliner)
	r.evict.first, r.evict.now = make(chan struct{}), time.Now
	if rl, ok := client.(interface{ ReloadState(context.Context) }); ok {
		r.reloader = rl
	}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("store: NewRedis: nil option")
		}
		if err := o(r); err != nil {
			return nil, err
		}
	}
	if r.tlsConfig != nil && !fromURL {
		return nil, errors.New("store: WithTLSConfig is for NewRedisURL: set the TLSConfig of the client given to NewRedis")
	}
	if r.evictCheck == EvictionWarn && r.logger == nil {
		return nil, errors.New("store: WithEvictionCheck(EvictionWarn) needs WithLogger")
	}
	if r.ackReplicas > 0 && r.batch != nil {
		return nil, errors.New("store: WithBatching and WithReplicaAck cannot be combined: WAIT must follow each script on its own connection")
	}
	if r.ackReplicas > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("store: WithReplicaAck needs a *redis.Client or *redis.ClusterClient, not %T", client)
		}
	}
	r.refusals = watchRefusals(client)
	return r, nil
}

// logKey is the name of the Redis key, a LIST, that holds the log of a
// rate key.
// A key that starts with its own hash tag ("{tag}rest", see Part.Key) is
// used as it is.
func (r *Redis) logKey(key string) string {
	if hasHashTag(key) {
		return r.prefix + key
	}
	return r.prefix + "{" + key + "}"
}

// keyFor is the name of the Redis key that holds the state of a rate key
// under alg: the log's for SlidingLog, a HASH beside it for the others.
func (r *Redis) keyFor(key string, alg contract.Algorithm) string {
	if alg == contract.SlidingLog {
		return r.logKey(key)
	}
	return r.logKey(key) + ":" + alg.String()
}

// Reserve implements Store. A refused connection fails it at once (see
// refused.go), with an error that matches syscall.ECONNREFUSED.
func (r *Redis) Reserve(ctx context.Context, key string, req contract.Request) (contract.Reservation, error) {
	wctx, w := r.refusals.watch(ctx)
	res, err := r.reserve(wctx, key, req)
	if refused := w.end(ctx, err != nil); refused != nil {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: %w", refused)
	}
	return res, err
}

// reserve is Reserve, on a context that a refused dial ends.
func (r *Redis) reserve(ctx context.Context, key string, req contract.Request) (contract.Reservation, error) {
	if err := req.Validate(key); err != nil {
		return contract.Reservation{}, err
	}
	if err := r.evictionGate(ctx); err != nil {
		return contract.Reservation{}, err
	}
	if req.Also != nil {
		if own, others := r.slotGroups(key, &req); others != nil {
			return r.reserveSlots(ctx, key, req, own, others) // slots.go
		}
	}
	if laned(&req) {
		return r.reserveLanes(ctx, key, req) // lanes.go
	}
	call, p := r.reserveCall(key, req)
	if req.Also != nil {
		call = r.alsoCall(call, key, &req, p >= 0) // multikey.go
	}
	var lease contract.Lease
	if req.InFlight > 0 {
		lease = r.withLease(&call, key, req) // lease.go
	}
	reply, err := r.runReserve(ctx, key, req, call, r.batch != nil)
	if err != nil {
		return contract.Reservation{}, err
	}
	if req.InFlight > 0 {
		return r.parseLeased(key, req, lease, reply)
	}
	return r.parseReserve(key, req, reply)
}

// runReserve runs the reserve call of key, through the batch when batched,
// and repairs the request's keys and runs it again once when it found one in
// a wrong state.
func (r *Redis) runReserve(ctx context.Context, key string, req contract.Request, call scriptCall, batched bool) ([]any, error) {
	run := func() ([]any, error) {
		switch {
		case r.ackReplicas > 0:
			return r.reserveAcked(ctx, call)
		case batched:
			return r.batch.do(ctx, call, key, req)
		case r.pipes != nil && r.rides.waiting.Load():
			// The overrides waiting go in the same round trip (ride.go).
			return r.evalRiding(ctx, r.pipes, []scriptCall{call})[0].Slice()
		default:
			return call.script.Run(ctx, r.client, call.keys, call.args...).Slice()
		}
	}
	reply, err := run()
	if err != nil && badState(err) {
		// Off the common path: one key in a wrong state is that key's
		// error alone (keystate.go).
		maxPer, _, _ := req.Valid(key)
		horizon := req.Horizon(maxPer) // keystate.go
		r.repairAlso(ctx, &req)        // multikey.go
		if reply, err = r.healed(ctx, key, req.Algorithm, req.Algorithm == contract.SlidingLog, horizon, err, run); err != nil {
			var ks *KeyStateError
			if errors.As(err, &ks) {
				return nil, err
			}
		}
	}
	if err != nil {
		r.failed(err)
		return nil, fmt.Errorf("store: redis reserve: %w", err)
	}
	return reply, nil
}

// reserveCall is the script call of a reservation of key: the algorithm's
// script (or the paced one), its keys and its arguments, without the extra
// keys or a lease. p is the index of the request's paced limit, or -1.
func (r *Redis) reserveCall(key string, req contract.Request) (call scriptCall, p int) {
	args := make([]any, 0, 5+3*len(req.Limits))
	args = append(args, req.Cost, contract.MicrosDown(req.MaxWait))
	if r.clock != nil {
		args = append(args, r.clock().UnixMicro())
	} else {
		args = append(args, "")
	}
	args = append(args, contract.MicrosDown(req.ServerWait()))
	if req.Algorithm == contract.SlidingLog {
		args = append(args, contract.Micros(req.Allowance))
	}
	p = req.PacedLimit()
	if p >= 0 {
		l := req.Limits[p]
		args = append(args, l.Interval(), l.Burst, p+1, l.Keep())
	}
	for i, l := range req.Limits {
		switch {
		case i == p:
		case req.Algorithm == contract.Buckets:
			args = append(args, l.N, l.BucketLen(), l.Buckets())
		default:
			args = append(args, l.N, contract.Micros(l.Per))
		}
	}
	call = scriptCall{reserveScripts[req.Algorithm], []string{r.keyFor(key, req.Algorithm), r.feedbackKey(key)}, args}
	if req.Algorithm == contract.SlidingLog {
		// The pace key is read only under a paced limit, the request's or
		// a learned one; the seen mark only when the log is missing.
		call.keys = append(call.keys, r.paceKey(key), r.seenKey(key))
	}
	if p >= 0 {
		call.script = pacedScript
	}
	return call, p
}

// parseReserve reads the reply of a reserve script.
func (r *Redis) parseReserve(key string, req contract.Request, reply []any) (contract.Reservation, error) {
	v, err := int64s(reply)
	if err != nil {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: %w", err)
	}
	allowed, wait, slot, limit, cause, entry, tat, spacing, moved := v[0], v[1], v[2], v[3], contract.Cause(v[4]), v[5], v[6], v[7], v[8]
	paced := req.PacedLimit() >= 0
	// A paced reply (the request's own paced limit, or a learned pace)
	// carries the TAT it left and its spacing.
	if allowed != 0 && allowed != 1 || wait < 0 || allowed == 1 && (slot <= 0 || entry < slot) ||
		allowed == 1 && paced && tat == 0 || tat != 0 && (allowed != 1 || tat <= slot || spacing <= 0) ||
		tat == 0 && spacing != 0 || moved < 0 || moved != 0 && tat == 0 ||
		v[4] < 0 || v[4] > int64(contract.CauseLearned) ||
		cause == contract.CauseLimit && !req.LimitNumber(limit) || cause != contract.CauseLimit && limit != 0 {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected reply %v", v)
	}
	res := contract.Reservation{Cause: cause, Key: key, Cost: int32(req.Cost)}
	if cause == contract.CauseLimit {
		res.Part, res.Limit, _ = req.PartOf(int(limit))
	}
	if allowed == 1 {
		res.Allowed, res.Delay, res.Slot, res.Entry = true, contract.FromMicros(wait), slot, entry
		if req.Algorithm != contract.SlidingLog {
			res.Alg, res.Limits = req.Algorithm, req.Limits // for Cancel
		}
		if tat != 0 {
			res.TAT, res.Spacing, res.Moved = tat, spacing, moved // for Cancel; moved for Reshaped
		}
		if req.Also != nil {
			res.AlsoKeys, res.Units = req.AlsoNames(), req.UnitsOf() // for Cancel and Settle
		}
	} else {
		res.RetryAfter = contract.FromMicros(wait)
	}
	return res, nil
}

// Cancel implements Store. The script call is sent at most once: go-redis
// re-sends a command after a read timeout or a broken connection, and a
// Cancel that ran but whose reply was lost would then run again and could
// remove the entries of another reservation at the same entry, which would be
// sent uncounted. A Cancel whose reply is lost returns an error; its entries
// may or may not be gone.
func (r *Redis) Cancel(ctx context.Context, res contract.Reservation) error {
	if !res.Allowed || res.Cost < 1 {
		return nil
	}
	wctx, w := r.refusals.watch(ctx)
	err := r.cancel(wctx, res)
	if refused := w.end(ctx, err != nil); refused != nil {
		return fmt.Errorf("store: redis cancel: %w", refused)
	}
	return err
}

// cancel is Cancel, on a context that a refused dial ends.
func (r *Redis) cancel(ctx context.Context, res contract.Reservation) error {
	if res.AlsoEntries != nil {
		return r.cancelSlots(ctx, res) // slots.go
	}
	call := scriptCall{cancelScript, []string{r.logKey(res.Key)}, []any{strconv.FormatInt(res.Entry, 10), res.Cost}}
	if res.TAT != 0 {
		call.script = cancelPacedScript
		call.keys = append(call.keys, r.paceKey(res.Key))
		call.args = append(call.args, strconv.FormatInt(res.TAT, 10), int64(res.Cost)*res.Spacing)
	}
	// Deleted when the cancel empties the log (cancel.lua).
	call.keys = append(call.keys, r.seenKey(res.Key))
	if res.Yielded != "" {
		call = r.cancelLanesCall(res) // lanes.go
	} else if res.Units != nil {
		call = r.cancelUnitsCall(res) // units.go
	} else if res.AlsoKeys != nil {
		call = r.cancelAlsoCall(call, res) // multikey.go
	}
	if res.Alg != contract.SlidingLog {
		call.script = cancelCountsScript
		call.keys[0] = r.keyFor(res.Key, res.Alg)
		call.args[0] = strconv.FormatInt(res.Slot, 10) // the counters of the slot
		totals := 0
		if res.Alg == contract.Buckets {
			totals = 1 // Buckets keeps a total per limit
		}
		call.args = append(call.args, totals)
		for _, l := range res.Limits {
			call.args = append(call.args, contract.Span(res.Alg, l))
		}
	}
	var err error
	if p, ok := r.client.(processor); ok {
		err = runOnce(ctx, p, call)
	} else {
		err = call.script.Run(ctx, r.client, call.keys, call.args...).Err()
	}
	if err != nil && badState(err) {
		// The entries are gone with the key's state; the next Reserve
		// repairs it.
		return &KeyStateError{Key: res.Key, Reason: "cancel", Err: err}
	}
	if err != nil {
		r.failed(err)
		return fmt.Errorf("store: redis cancel: %w", err)
	}
	return nil
}

// reserveAcked runs the reserve script and WAIT in one pipeline on the
// connection of the key's master, so that WAIT counts the replicas that have
// the script's writes. A script missing from the cache (NOSCRIPT) ran
// nothing, so the pipeline is sent again with EVAL.
func (r *Redis) reserveAcked(ctx context.Context, call scriptCall) ([]any, error) {
	var node *redis.Client
	switch c := r.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, call.keys[0]); err != nil {
			return nil, err
		}
	}
	ms := int64((r.ackTimeout + time.Millisecond - 1) / time.Millisecond)
	var wait *redis.Cmd
	var err error
	script := evalSHA(ctx, []scriptCall{call}, func(cmds []*redis.Cmd) {
		pipe := node.Pipeline()
		_ = pipe.Process(ctx, cmds[0])
		wait = pipe.Do(ctx, "wait", r.ackReplicas, ms)
		_, err = pipe.Exec(ctx)
	})[0]
	if err := script.Err(); err != nil {
		// A MOVED reply: the cached slot map is stale (a failover or a
		// resharding). The Cluster client reloads it; this call fails.
		if r.reloader != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
			r.reloader.ReloadState(ctx)
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	reply, err := script.Slice()
	if err != nil {
		return nil, err
	}
	acked, err := wait.Int64()
	if err != nil {
		return nil, fmt.Errorf("WAIT: %w", err)
	}
	if acked < int64(r.ackReplicas) {
		return nil, fmt.Errorf("%w: %d of %d within %s", ErrReplicaAck, acked, r.ackReplicas, r.ackTimeout)
	}
	return reply, nil
}

// failed asks a Cluster client to reload its map of slots after a failure
// that was not an answer from Redis (a refused connection, a timeout). A
// go-redis ClusterClient follows MOVED replies by itself, but a master that
// died answers nothing: without a reload the client keeps sending the key's
// commands to it until ClusterStateReloadInterval (60 s by default) has
// passed, long after its replica took over. The reload runs in the
// background, at most one at a time with a pause of 200 ms between.
func (r *Redis) failed(err error) {
	if r.reloader == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return
	}
	r.reloader.ReloadState(context.Background())
}

// int64s checks that a script reply is a list of five to eight integers: a
// reply of five (a refusal, or a counting algorithm, which records at the
// slot) gets the slot as its sixth, the entry; the seventh and eighth, a
// paced limit's TAT and spacing, are 0 when absent.
func int64s(reply []any) (out [9]int64, err error) {
	if len(reply) < 5 || len(reply) > len(out) {
		return out, fmt.Errorf("unexpected reply of %d elements", len(reply))
	}
	for i, e := range reply {
		v, ok := e.(int64)
		if !ok {
			return out, fmt.Errorf("unexpected reply element %d of type %T", i, e)
		}
		out[i] = v
	}
	if len(reply) < 6 {
		out[5] = out[2]
	}
	return out, nil
}

// paceKey is the name of the Redis key, a STRING, that holds the theoretical
// arrival time of a rate key's paced limit.
func (r *Redis) paceKey(key string) string { return r.logKey(key) + ":pace" }

// seenKey is the name of the Redis key, a STRING, that marks a rate key's
// log as written, for as long as the log lives: a log missing while its mark
// exists was lost, and the next reservation assumes it was full (write.lua).
// Delete leaves it, so that a reset key waits out what it had sent.
func (r *Redis) seenKey(key string) string { return r.logKey(key) + ":seen" }

// SeenKey implements contract.Admin: the name of key's seen mark.
func (r *Redis) SeenKey(key string) string { return r.seenKey(key) }

// feedbackKey is the name of the Redis key, a HASH, that holds what the
// upstream said about a rate key (see Feedback).
func (r *Redis) feedbackKey(key string) string { return r.logKey(key) + ":p" }

// Pause implements Feedback.
func (r *Redis) Pause(ctx context.Context, key string, d time.Duration) error {
	return r.Learn(ctx, key, contract.Learned{Pause: d})
}

// Learn implements Feedback: one script call that merges l into the key's
// feedback hash and marks the key's log, so that its next reservation reads
// the hash (reservations skip the read while no mark says there is one).
func (r *Redis) Learn(ctx context.Context, key string, l contract.Learned) error {
	_, err := r.LearnEffect(ctx, key, l)
	return err
}

// LearnEffect implements Effector: Learn, and what it did to the key's
// learned margin and pace, from the script's reply.
func (r *Redis) LearnEffect(ctx context.Context, key string, l contract.Learned) (contract.Effect, error) {
	if err := l.Validate(key); err != nil {
		return contract.Effect{}, err
	}
	if l.Empty() {
		return contract.Effect{}, nil
	}
	wctx, w := r.refusals.watch(ctx)
	e, err := r.learn(wctx, key, l)
	if refused := w.end(ctx, err != nil); refused != nil {
		return contract.Effect{}, fmt.Errorf("store: redis feedback: %w", refused)
	}
	return e, err
}

// learn is LearnEffect, on a context that a refused dial ends.
func (r *Redis) learn(ctx context.Context, key string, l contract.Learned) (contract.Effect, error) {
	now := ""
	if r.clock != nil {
		now = strconv.FormatInt(r.clock().UnixMicro(), 10)
	}
	// Validate ensures a limit comes with its window and TTL.
	run := func() ([]any, error) {
		return feedbackScript.Run(ctx, r.client, []string{r.feedbackKey(key), r.logKey(key)},
			now, contract.Micros(l.Pause), l.Limit.N, contract.Micros(l.Limit.Per), contract.Micros(l.LimitTTL),
			l.Remaining, contract.Micros(l.Reset), contract.Micros(contract.ResetSlack),
			contract.PaceInterval(l.Pace), l.Pace.Burst, contract.Micros(l.PaceTTL), contract.Micros(l.Probe),
			contract.Micros(l.Margin), contract.Micros(l.MarginTTL), contract.Micros(l.MarginCap), contract.Micros(l.MarginAge),
			contract.Micros(l.MarginProbe)).Slice()
	}
	reply, err := run()
	if err != nil && badState(err) {
		// The log's horizon is not known here: the repair fixes types and
		// malformed values, and the next Reserve the rest.
		if reply, err = r.healed(ctx, key, contract.SlidingLog, false, contract.Micros(contract.MaxFeedback), err, run); err != nil {
			var ks *KeyStateError
			if errors.As(err, &ks) {
				return contract.Effect{}, err
			}
		}
	}
	if err != nil {
		return contract.Effect{}, fmt.Errorf("store: redis feedback: %w", err)
	}
	return effectOf(reply)
}

// effectOf decodes feedback.lua's reply: { pause, xm, xrem, narrowed,
// hurried, pt }.
func effectOf(reply []any) (contract.Effect, error) {
	v := make([]int64, 6)
	if len(reply) != len(v) {
		return contract.Effect{}, fmt.Errorf("store: redis feedback: unexpected reply %v", reply)
	}
	for i, e := range reply {
		x, ok := e.(int64)
		if !ok || x < 0 {
			return contract.Effect{}, fmt.Errorf("store: redis feedback: unexpected reply element %d: %v", i, e)
		}
		v[i] = x
	}
	e := contract.Effect{Narrowed: v[3] == 1, Hurried: v[4] == 1, Spacing: contract.FromMicros(v[5])}
	if v[1] > 0 {
		e.Margin, e.MarginFor = contract.FromMicros(v[1]), contract.FromMicros(v[2])
	}
	return e, nil
}
