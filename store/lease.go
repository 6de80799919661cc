package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/store/internal/script"
)

// This file is the cap on requests in flight (Request.InFlight): the lease a
// reservation takes in the same call, and the operations on it. The design,
// and how many calls it costs, is in docs/concurrency.md.

// Lease is a request's place under a key's cap on requests in flight
// (Request.InFlight), taken by the reservation that granted it
// (Reservation.Lease), or a ticket to wait for one in the key's queue when
// none was free (see Leases.Await). The zero Lease holds nothing.
type Lease struct {
	key string // the rate key
	id  string // unique across the fleet (Redis: a LIST in the key's slot)
	// cap and dur (microseconds) are the request's InFlight and LeaseFor:
	// what a release needs to serve the queue.
	cap int
	dur int64
	// A ticket: the time the waiter stays in the queue until (µs, store
	// clock; 0: held, not waiting), its longest wait on the caller's clock.
	deadline int64
	wait     time.Duration
}

// Held reports whether l holds a place under the cap (and must be given back
// with Leases.Release).
func (l Lease) Held() bool { return l.id != "" && l.deadline == 0 }

// Queued reports whether l is a ticket in the key's queue: the caller must
// either wait for a lease with Leases.Await or leave with Leases.Release.
func (l Lease) Queued() bool { return l.deadline != 0 }

// Leases is the part of a store that caps requests in flight. Both stores
// implement it.
type Leases interface {
	// Await waits, at most the queued reservation's MaxWait, until a lease
	// is handed to the ticket (released or expired ones are handed to the
	// queue in order) and returns it, Held. When the wait ends first it
	// leaves the queue and returns a zero Lease; when ctx ends first it
	// leaves too and returns ctx's error.
	Await(ctx context.Context, ticket Lease) (Lease, error)
	// Release gives back a held lease (serving the queue), or leaves the
	// queue with a ticket. Releasing twice, or a lease that expired, is
	// harmless.
	Release(ctx context.Context, l Lease) error
	// Renew extends a held lease by its duration from now. It returns
	// ErrLeaseExpired if the lease had expired (and may have been taken by
	// another request meanwhile).
	Renew(ctx context.Context, l Lease) error
}

// ErrLeaseExpired is returned by Renew for a lease that had expired.
var ErrLeaseExpired = errors.New("store: the lease had expired")

// MaxLease bounds Request.LeaseFor.
const MaxLease = 24 * time.Hour

// leaseValid reports whether r's in-flight fields are well formed.
func (r *Request) leaseValid() bool {
	return r.InFlight == 0 && r.LeaseFor == 0 && r.Held.id == "" ||
		r.InFlight >= 1 && r.InFlight <= math32 && r.LeaseFor >= time.Millisecond && r.LeaseFor <= MaxLease &&
			(r.Held.id == "" || r.Held.Held())
}

const math32 = 1<<31 - 1

// leaseInvalid returns the error of an in-flight field of r, nil if none.
func (r *Request) leaseInvalid() error {
	if r.leaseValid() {
		return nil
	}
	return fmt.Errorf("%w: InFlight %d, LeaseFor %s: InFlight must be 0 (no cap, and no LeaseFor or Held), or 1 to %d with LeaseFor from 1ms to %s, and Held a held lease",
		ErrInvalidRequest, r.InFlight, r.LeaseFor, math32, MaxLease)
}

// leaseFor returns the lease of r at key: the held one, or a new id.
func (r *Request) lease(key string, newID func() string) Lease {
	if r.Held.id != "" {
		return Lease{key: key, id: r.Held.id, cap: r.InFlight, dur: micros(r.LeaseFor)}
	}
	return Lease{key: key, id: newID(), cap: r.InFlight, dur: micros(r.LeaseFor)}
}

// leaseProcess and leaseSeq make lease ids unique across the fleet: a random
// name for this process, and a counter.
var (
	leaseProcess = func() string {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		return hex.EncodeToString(b[:])
	}()
	leaseSeq atomic.Uint64
)

// leaseKeys are the Redis keys of a rate key's leases (a ZSET) and queue (a
// LIST); a lease id is a LIST beside them (its waiter's wake-up).
func (r *Redis) leaseKeys(key string) (leases, queue string) {
	k := r.logKey(key)
	return k + ":lease", k + ":lq"
}

// leaseID is a new lease id of key, in its hash slot.
func (r *Redis) leaseID(key string) string {
	return r.logKey(key) + ":l:" + leaseProcess + "." + strconv.FormatUint(leaseSeq.Add(1), 36)
}

var (
	leasedScripts = [...]luaScript{
		SlidingLog:     newScript(script.Leased(SlidingLog.String())),
		FixedWindow:    newScript(script.Leased(FixedWindow.String())),
		SlidingCounter: newScript(script.Leased(SlidingCounter.String())),
		Buckets:        newScript(script.Leased(Buckets.String())),
	}
	leasedPacedScript = newScript(script.Leased("paced"))
	leaseOpsScript    = newScript(script.LeaseOps())
)

// withLease makes call the leased variant of itself: its script, and the
// lease's keys and arguments at the ends (lease_open.lua takes them off).
func (r *Redis) withLease(call *scriptCall, key string, req Request) Lease {
	l := req.lease(key, func() string { return r.leaseID(key) })
	if call.script.Hash() == pacedScript.Hash() {
		call.script = leasedPacedScript
	} else {
		call.script = leasedScripts[req.Algorithm]
	}
	lk, qk := r.leaseKeys(key)
	held := "0"
	if req.Held.id != "" {
		held = "1"
	}
	call.keys = append(call.keys, lk, qk, l.id)
	call.args = append(call.args, l.cap, l.dur, held)
	return l
}

// parseLeased reads the reply of a leased reserve script.
func (r *Redis) parseLeased(key string, req Request, l Lease, reply []any) (Reservation, error) {
	if len(reply) == 6 {
		if c, ok := reply[4].(int64); ok && Cause(c) == CauseInFlight {
			v, err := int64s(reply)
			if err != nil || v[0] != 0 || v[1] < 0 || v[2] != 0 || v[3] != 0 || v[5] < 0 {
				return Reservation{}, fmt.Errorf("store: redis reserve: unexpected reply %v", reply)
			}
			return inFlight(l, req, v[1], v[5]), nil
		}
	}
	res, err := r.parseReserve(key, req, reply)
	if err == nil && res.Allowed {
		res.Lease = l
	}
	return res, err
}

// inFlight is the refusal of a request that found no lease free: retry is
// the time until the earliest lease expires; deadline, if not 0, how long
// the caller stays in the queue (a ticket).
func inFlight(l Lease, req Request, retry, deadline int64) Reservation {
	res := Reservation{Cause: CauseInFlight, RetryAfter: usDuration(retry), key: l.key, cost: int32(req.Cost)}
	if deadline != 0 {
		l.deadline, l.wait = deadline, req.MaxWait
		res.Lease = l
	}
	return res
}

// leaseOp runs one operation of lease_ops.lua on l, at most once (a
// release run twice would be harmless, but a leave must not outlive the
// caller's wait).
func (r *Redis) leaseOp(ctx context.Context, op string, l Lease) (held bool, wait int64, err error) {
	lk, qk := r.leaseKeys(l.key)
	now := ""
	if r.clock != nil {
		now = strconv.FormatInt(r.clock().UnixMicro(), 10)
	}
	member := ""
	if l.deadline != 0 {
		member = strconv.FormatInt(l.deadline, 10) + " " + l.id
	}
	call := scriptCall{leaseOpsScript, []string{lk, qk, l.id}, []any{op, now, l.cap, l.dur, member}}
	reply, err := call.script.Run(ctx, r.client, call.keys, call.args...).Slice()
	if err != nil {
		r.failed(err)
		return false, 0, fmt.Errorf("store: redis lease %s: %w", op, err)
	}
	if len(reply) != 2 {
		return false, 0, fmt.Errorf("store: redis lease %s: unexpected reply %v", op, reply)
	}
	h, ok1 := reply[0].(int64)
	w, ok2 := reply[1].(int64)
	if !ok1 || !ok2 || h != 0 && h != 1 || w < 0 {
		return false, 0, fmt.Errorf("store: redis lease %s: unexpected reply %v", op, reply)
	}
	return h == 1, w, nil
}

// Release implements Leases.
func (r *Redis) Release(ctx context.Context, l Lease) error {
	switch {
	case l.Queued():
		_, _, err := r.leaseOp(ctx, "leave", l)
		return err
	case l.Held():
		_, _, err := r.leaseOp(ctx, "release", l)
		return err
	}
	return nil
}

// Renew implements Leases.
func (r *Redis) Renew(ctx context.Context, l Lease) error {
	if !l.Held() {
		return nil
	}
	held, _, err := r.leaseOp(ctx, "renew", l)
	if err == nil && !held {
		err = ErrLeaseExpired
	}
	return err
}

// leasePoll bounds one blocking wait for a handover (BLPOP): below the
// client's default read timeout (3 s), which bounds a command's reply.
const leasePoll = time.Second

// Await implements Leases. The waiter blocks on its own LIST (BLPOP), which
// a release fills when it hands the lease over: one blocked call per
// leasePoll at most, holding one pool connection meanwhile; between two, a
// check reclaims expired leases (a holder that died) and serves the queue.
// The blocking call runs on its own goroutine, so that Await returns as soon
// as ctx ends; that goroutine ends within leasePoll and leaves the queue.
func (r *Redis) Await(ctx context.Context, t Lease) (Lease, error) {
	if !t.Queued() {
		return Lease{}, fmt.Errorf("%w: Await needs a queued ticket", ErrInvalidRequest)
	}
	p, ok := r.client.(processor)
	if !ok {
		return Lease{}, fmt.Errorf("store: Await needs a client that runs commands (Client, ClusterClient, Ring), not %T", r.client)
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan awaited, 1)
	go func() { done <- r.await(wctx, p, t) }()
	select {
	case a := <-done:
		stop()
		return a.l, a.err
	case <-ctx.Done():
		stop() // the goroutine leaves the queue, within leasePoll
		go func() {
			// A lease handed just before the end goes back.
			if a := <-done; a.l.Held() {
				rctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
				defer cancel()
				_ = r.Release(rctx, a.l)
			}
		}()
		return Lease{}, ctx.Err()
	}
}

type awaited struct {
	l   Lease
	err error
}

// await is Await's loop. When wctx ends, it leaves the queue (giving back a
// lease handed meanwhile) on a context of its own.
func (r *Redis) await(wctx context.Context, p processor, t Lease) awaited {
	held := t
	held.deadline, held.wait = 0, 0
	// left is the wait still allowed: the blocking calls' timeouts, which the
	// server measures, are taken off it, so the wait never ends early.
	left, next := t.wait, time.Duration(0) // next: until the earliest lease expires (0: unknown)
	for left > 0 {
		step := min(leasePoll, left)
		if next > 0 {
			step = min(step, next+time.Millisecond)
		}
		step = max(step, time.Millisecond)
		cmd := redis.NewStringSliceCmd(wctx, "blpop", t.id, strconv.FormatFloat(step.Seconds(), 'f', 3, 64))
		cmd.SetFirstKeyPos(1)
		err := p.Process(wctx, cmd)
		switch {
		case err == nil:
			return awaited{l: held}
		case errors.Is(err, redis.Nil):
			left -= step
		default:
			r.leave(t)
			return awaited{err: fmt.Errorf("store: redis await: %w", err)}
		}
		got, wait, err := r.leaseOp(wctx, "check", t)
		if err != nil {
			r.leave(t)
			return awaited{err: err}
		}
		if got {
			return awaited{l: held}
		}
		next = usDuration(wait)
	}
	r.leave(t)
	return awaited{}
}

// leaveTimeout bounds the call that leaves the queue after a wait ended.
const leaveTimeout = 5 * time.Second

// leave takes t out of the queue, giving back a lease handed to it meanwhile.
func (r *Redis) leave(t Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	_, _, _ = r.leaseOp(ctx, "leave", t)
}
