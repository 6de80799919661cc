package memstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// The in-memory twin of the leases (lease.go, internal/script/lease*.lua):
// the same answers, the handover a closed channel instead of a LIST.

// memLeaseState is a Memory store's leases, per key, and the channel of each
// waiter, closed when a lease is handed to it. Guarded by Memory.mu.
type memLeaseState struct {
	keys  map[string]*memLeases
	woken map[string]chan struct{}
	seq   uint64
}

// memLeases is one key's leases and queue, as its two Redis keys.
type memLeases struct {
	held  map[string]int64 // lease id -> expiry (µs)
	queue []memWaiter      // oldest first
}

type memWaiter struct {
	deadline int64
	id       string
}

// leasesOf returns key's state, made if absent; m.mu is held.
func (m *Memory) leasesOf(key string) *memLeases {
	s := &m.lease
	if s.keys == nil {
		s.keys, s.woken = make(map[string]*memLeases), make(map[string]chan struct{})
	}
	ls := s.keys[key]
	if ls == nil {
		ls = &memLeases{held: make(map[string]int64)}
		s.keys[key] = ls
	}
	return ls
}

// leaseFree is lease_free in lease.lua: reclaim the expired leases, hand the
// free ones to the queue, and return how many are held; m.mu is held.
func (m *Memory) leaseFree(ls *memLeases, l contract.Lease, now int64) int {
	for id, exp := range ls.held {
		if exp <= now {
			delete(ls.held, id)
			delete(m.lease.woken, id) // handed to a waiter that never came
		}
	}
	for len(ls.held) < l.Cap && len(ls.queue) > 0 {
		w := ls.queue[0]
		ls.queue = ls.queue[1:]
		if w.deadline <= now {
			delete(m.lease.woken, w.id)
			continue
		}
		ls.held[w.id] = now + l.Dur
		if ch := m.lease.woken[w.id]; ch != nil {
			close(ch)
		}
	}
	return len(ls.held)
}

// leaseEarliest is lease_earliest: until the earliest expiry, 0 if none.
func leaseEarliest(ls *memLeases, now int64) int64 {
	var e int64
	for _, exp := range ls.held {
		if e == 0 || exp < e {
			e = exp
		}
	}
	if e == 0 {
		return 0
	}
	return max(e-now, 0)
}

// leaseRetry is lease_retry: the RetryAfter of a refusal in flight.
func leaseRetry(ls *memLeases, l contract.Lease, now int64) int64 {
	var earliest, newest int64
	for _, exp := range ls.held {
		if earliest == 0 || exp < earliest {
			earliest = exp
		}
		newest = max(newest, exp)
	}
	if earliest == 0 {
		return 0
	}
	since := max(now-(newest-l.Dur), 1000)
	return max(min(since*int64(len(ls.queue)+1), earliest-now), 0)
}

// leaseBefore is leased.lua's first half for Reserve: the lease the request holds or may
// take, and, when none is free, the refusal (ok false; the request joined
// the queue if it may wait); m.mu is held.
func (m *Memory) leaseBefore(key string, req *contract.Request, now int64) (l contract.Lease, refusal contract.Reservation, ok bool) {
	mine := false
	l = req.LeaseAt(key, func() string {
		m.lease.seq++
		return "memory:" + strconv.FormatUint(m.lease.seq, 36)
	})
	ls := m.leasesOf(key)
	n := m.leaseFree(ls, l, now)
	if req.Held.ID != "" {
		exp, found := ls.held[l.ID]
		mine = found && exp > now
	}
	if mine || n < l.Cap {
		return l, contract.Reservation{}, true
	}
	retry, deadline := leaseRetry(ls, l, now), int64(0)
	if w := contract.MicrosDown(req.MaxWait); w > 0 {
		deadline = now + w
		ls.queue = append(ls.queue, memWaiter{deadline, l.ID})
		m.lease.woken[l.ID] = make(chan struct{})
	}
	return l, contract.InFlightRefusal(l, *req, retry, deadline), false
}

// leaseAfter is leased.lua's second half: a granted reservation records its lease (a held
// one renewed) and carries it; m.mu is held (Reserve defers it under its
// lock).
func (m *Memory) leaseAfter(res *contract.Reservation, l contract.Lease, now int64) {
	if !res.Allowed {
		m.leaseDrop(l.Key, m.leasesOf(l.Key))
		return
	}
	m.leasesOf(l.Key).held[l.ID] = now + l.Dur
	res.Lease = l
}

// leaseOp is lease_ops.lua.
func (m *Memory) leaseOp(op string, l contract.Lease) (held bool, wait int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.micros()
	ls := m.leasesOf(l.Key)
	defer m.leaseDrop(l.Key, ls)
	if exp, ok := ls.held[l.ID]; ok && exp > now {
		held = true
	}
	switch op {
	case "renew":
		if held {
			ls.held[l.ID] = now + l.Dur
		}
		return held, 0
	case "leave":
		ls.queue = slices.DeleteFunc(ls.queue, func(w memWaiter) bool { return w.id == l.ID })
		delete(m.lease.woken, l.ID)
		fallthrough
	case "release":
		delete(ls.held, l.ID)
	}
	m.leaseFree(ls, l, now)
	if op == "check" {
		if exp, ok := ls.held[l.ID]; ok && exp > now {
			delete(m.lease.woken, l.ID)
			return true, 0
		}
		return false, leaseEarliest(ls, now)
	}
	return held, 0
}

// leaseDrop forgets a key with no lease and no waiter, as Redis deletes an
// empty ZSET and LIST; m.mu is held.
func (m *Memory) leaseDrop(key string, ls *memLeases) {
	if len(ls.held) == 0 && len(ls.queue) == 0 {
		delete(m.lease.keys, key)
	}
}

// Release implements Leases.
func (m *Memory) Release(_ context.Context, l contract.Lease) error {
	switch {
	case l.Queued():
		m.leaseOp("leave", l)
	case l.Held():
		m.leaseOp("release", l)
	}
	return nil
}

// Renew implements Leases.
func (m *Memory) Renew(_ context.Context, l contract.Lease) error {
	if !l.Held() {
		return nil
	}
	if held, _ := m.leaseOp("renew", l); !held {
		return contract.ErrLeaseExpired
	}
	return nil
}

// Await implements Leases, as the Redis store's: woken by the handover, with
// a check at the earliest expiry, at least every contract.LeasePoll.
func (m *Memory) Await(ctx context.Context, t contract.Lease) (contract.Lease, error) {
	if !t.Queued() {
		return contract.Lease{}, fmt.Errorf("%w: Await needs a queued ticket", contract.ErrInvalidRequest)
	}
	m.mu.Lock()
	ch := m.lease.woken[t.ID]
	m.mu.Unlock()
	held := t
	held.Deadline, held.Wait = 0, 0
	left, next := t.Wait, time.Duration(0)
	for ch != nil && left > 0 {
		step := min(contract.LeasePoll, left)
		if next > 0 {
			step = min(step, next+time.Millisecond)
		}
		step = max(step, time.Millisecond)
		timer := time.NewTimer(step)
		select {
		case <-ch:
			timer.Stop()
			if got, _ := m.leaseOp("check", t); got {
				return held, nil
			}
			left = 0 // handed, then expired: the wait is over
			continue
		case <-ctx.Done():
			timer.Stop()
			m.leaseOp("leave", t)
			return contract.Lease{}, ctx.Err()
		case <-timer.C:
			left -= step
		}
		got, wait := m.leaseOp("check", t)
		if got {
			return held, nil
		}
		next = contract.FromMicros(wait)
	}
	m.leaseOp("leave", t)
	return contract.Lease{}, nil
}
