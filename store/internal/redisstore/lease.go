package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/script"
)

// This file is the cap on requests in flight (Request.InFlight): the lease a
// reservation takes in the same call, and the operations on it. The design,
// and how many calls it costs, is in docs/concurrency.md.

// leaseKeys are the Redis keys of a rate key's leases (a ZSET), queue (a
// LIST) and this store's inbox (a LIST: the handover pushes the ids of its
// waiters' leases there).
func (r *Redis) leaseKeys(key string) (leases, queue, inbox string) {
	k := r.logKey(key)
	return k + ":lease", k + ":lq", k + ":lw:" + r.inboxes.name()
}

var (
	leasedScripts = [...]luaScript{
		contract.SlidingLog:     newScript(script.Leased(contract.SlidingLog.String())),
		contract.FixedWindow:    newScript(script.Leased(contract.FixedWindow.String())),
		contract.SlidingCounter: newScript(script.Leased(contract.SlidingCounter.String())),
		contract.Buckets:        newScript(script.Leased(contract.Buckets.String())),
	}
	leasedPacedScript = newScript(script.Leased("paced"))
	// With more keys (Request.Also; multikey.go): the cap on the own key.
	leasedAlsoScript      = newScript(script.Leased("log+also"))
	leasedPacedAlsoScript = newScript(script.Leased("paced+also"))
	leaseOpsScript        = newScript(script.LeaseOps())
)

// leaseScripts adds the scripts of this file to Scripts' map.
func leaseScripts(out map[string]string) {
	for a, s := range leasedScripts {
		out["reserve "+contract.Algorithm(a).String()+", leased"] = s.src
	}
	out["reserve paced, leased"], out["lease ops"] = leasedPacedScript.src, leaseOpsScript.src
	out["reserve log+also, leased"], out["reserve paced+also, leased"] = leasedAlsoScript.src, leasedPacedAlsoScript.src
}

// withLease makes call the leased variant of itself: its script, and the
// lease's keys and arguments at the ends (request.lua's parser takes them off).
func (r *Redis) withLease(call *scriptCall, key string, req contract.Request) contract.Lease {
	l := req.LeaseAt(key, contract.NewLeaseID)
	switch call.script.Hash() {
	case pacedScript.Hash():
		call.script = leasedPacedScript
	case reserveAlsoScript.Hash():
		call.script = leasedAlsoScript
	case reservePacedAlsoScript.Hash():
		call.script = leasedPacedAlsoScript
	default:
		call.script = leasedScripts[req.Algorithm]
	}
	lk, qk, inbox := r.leaseKeys(key)
	held := "0"
	if req.Held.ID != "" {
		held = "1"
	}
	call.keys = append(call.keys, lk, qk, inbox)
	call.args = append(call.args, l.Cap, l.Dur, held, l.ID)
	return l
}

// parseLeased reads the reply of a leased reserve script.
func (r *Redis) parseLeased(key string, req contract.Request, l contract.Lease, reply []any) (contract.Reservation, error) {
	if len(reply) == 6 {
		if c, ok := reply[4].(int64); ok && contract.Cause(c) == contract.CauseInFlight {
			v, err := int64s(reply)
			if err != nil || v[0] != 0 || v[1] < 0 || v[2] != 0 || v[3] != 0 || v[5] < 0 {
				return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected reply %v", reply)
			}
			return contract.InFlightRefusal(l, req, v[1], v[5]), nil
		}
	}
	res, err := r.parseReserve(key, req, reply)
	if err == nil && res.Allowed {
		res.Lease = l
	}
	return res, err
}

// leaseOp runs one operation of lease_ops.lua on l.
func (r *Redis) leaseOp(ctx context.Context, op string, l contract.Lease) (held bool, wait int64, err error) {
	lk, qk, inbox := r.leaseKeys(l.Key)
	now := ""
	if r.clock != nil {
		now = strconv.FormatInt(r.clock().UnixMicro(), 10)
	}
	member := ""
	if l.Deadline != 0 {
		member = strconv.FormatInt(l.Deadline, 10) + " " + l.ID + " " + inbox
	}
	reply, err := leaseOpsScript.Run(ctx, r.client, []string{lk, qk}, op, now, l.Cap, l.Dur, l.ID, member).Slice()
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
func (r *Redis) Release(ctx context.Context, l contract.Lease) error {
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
func (r *Redis) Renew(ctx context.Context, l contract.Lease) error {
	if !l.Held() {
		return nil
	}
	held, _, err := r.leaseOp(ctx, "renew", l)
	if err == nil && !held {
		err = contract.ErrLeaseExpired
	}
	return err
}

// Await implements Leases. The waiter is woken by its store's inbox for the
// key, which one goroutine per key with waiters reads (one blocked BLPOP,
// so one pool connection, per key and store however many wait); at the
// earliest expiry of a lease, and at least every contract.LeasePoll, it checks
// (reclaiming expired leases, a holder that died, and serving the queue).
// When ctx ends it returns at once and leaves the queue in the background.
func (r *Redis) Await(ctx context.Context, t contract.Lease) (contract.Lease, error) {
	if !t.Queued() {
		return contract.Lease{}, fmt.Errorf("%w: Await needs a queued ticket", contract.ErrInvalidRequest)
	}
	p, ok := r.client.(processor)
	if !ok {
		return contract.Lease{}, fmt.Errorf("store: Await needs a client that runs commands (Client, ClusterClient, Ring), not %T", r.client)
	}
	_, _, inbox := r.leaseKeys(t.Key)
	woken, done := r.inboxes.wait(r, p, inbox, t.ID)
	defer done()
	held := t
	held.Deadline, held.Wait = 0, 0
	// left is the wait still allowed, as the timers measured it.
	left, next := t.Wait, time.Duration(0) // next: until the earliest lease expires (0: unknown)
	for left > 0 {
		step := min(contract.LeasePoll, left)
		if next > 0 {
			step = min(step, next+time.Millisecond)
		}
		timer := time.NewTimer(step)
		select {
		case <-woken:
			timer.Stop()
			return held, nil
		case <-ctx.Done():
			timer.Stop()
			go r.leave(t)
			return contract.Lease{}, ctx.Err()
		case <-timer.C:
			left -= step
		}
		got, wait, err := r.leaseOp(ctx, "check", t)
		if err != nil {
			go r.leave(t)
			if ctx.Err() != nil {
				return contract.Lease{}, ctx.Err()
			}
			return contract.Lease{}, err
		}
		if got {
			return held, nil
		}
		next = contract.FromMicros(wait)
	}
	r.leave(t)
	return contract.Lease{}, nil
}

// leaveTimeout bounds the call that leaves the queue after a wait ended.
const leaveTimeout = 5 * time.Second

// leave takes t out of the queue, giving back a lease handed to it meanwhile.
func (r *Redis) leave(t contract.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	_, _, _ = r.leaseOp(ctx, "leave", t)
}

// inboxes are a Redis store's inboxes, by Redis key: the waiters of each,
// and the goroutine reading it while any waits.
type inboxes struct {
	once sync.Once
	id   string
	mu   sync.Mutex
	by   map[string]*inbox
}

type inbox struct {
	waiters map[string]chan struct{} // by lease id
	// early holds the ids read before their waiter came (it had its
	// reply, not yet called Await); bounded, dropped when idle.
	early map[string]bool
}

// maxEarly bounds inbox.early: ids whose waiter never comes (it left, or
// got its lease by a check) are forgotten past it.
const maxEarly = 1024

// name is this store's part of its inboxes' names: unique in the fleet.
func (b *inboxes) name() string {
	b.once.Do(func() { b.id = contract.NewLeaseID() })
	return b.id
}

// wait registers a waiter for the lease id in the inbox key, starting its
// reader if none runs, and returns the channel closed when the id is read
// and the function that unregisters it.
func (b *inboxes) wait(r *Redis, p processor, key, id string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil {
		b.by = make(map[string]*inbox)
	}
	ib := b.by[key]
	if ib == nil {
		ib = &inbox{waiters: make(map[string]chan struct{}), early: make(map[string]bool)}
		b.by[key] = ib
		go b.read(r, p, key, ib)
	}
	if ib.early[id] {
		delete(ib.early, id)
		close(ch)
	} else {
		ib.waiters[id] = ch
	}
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(ib.waiters, id)
	}
}

// read reads the inbox key while it has waiters, and wakes each waiter
// whose lease id it reads. It ends within contract.LeasePoll of the last waiter's
// leaving.
func (b *inboxes) read(r *Redis, p processor, key string, ib *inbox) {
	for {
		b.mu.Lock()
		if len(ib.waiters) == 0 {
			delete(b.by, key)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		cmd := redis.NewStringSliceCmd(context.Background(), "blpop", key, strconv.FormatFloat(contract.LeasePoll.Seconds(), 'f', 3, 64))
		cmd.SetFirstKeyPos(1)
		err := p.Process(context.Background(), cmd)
		if err != nil && !errors.Is(err, redis.Nil) {
			// The waiters check on their own meanwhile; do not spin.
			r.failed(err)
			time.Sleep(contract.LeasePoll / 10)
			continue
		}
		if err != nil || len(cmd.Val()) != 2 {
			continue
		}
		id := cmd.Val()[1]
		b.mu.Lock()
		if ch := ib.waiters[id]; ch != nil {
			delete(ib.waiters, id)
			close(ch)
		} else {
			if len(ib.early) >= maxEarly {
				clear(ib.early)
			}
			ib.early[id] = true
		}
		b.mu.Unlock()
	}
}
