package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// This file is what a process has heard of its keys' pauses and moves to a
// stricter pace while requests wait, so that a waiter whose slot was placed
// before one does not send into it: at its wake-up it takes a new slot
// instead (admit.go). Without it, the slots a fleet had reserved before the
// upstream's first 429 went out on the old shape, each a likely 429 against
// an upstream that spaces strictly, and waiters sent into a pause.
//
// It hears from two places: its own feedback (a pause, a move recorded by
// this process, on its own clock), and the store's replies to any of its
// reservations (a slot a pause set, and Reservation.Reshaped: the moves
// other processes recorded, on the store's clock).

// keyNews is the registry; the zero value is empty and ready.
type keyNews struct {
	any   atomic.Bool   // some key has news: waiters look them up
	epoch atomic.Uint64 // counts what this process recorded (a reservation notes it before its call)
	mu    sync.RWMutex
	keys  map[string]news
}

// news is what is known of one key.
type news struct {
	// On the store's clock (microseconds), from replies: the latest move to
	// a stricter pace, and the latest end of a pause that set a slot.
	moved, pausedTill int64
	// From what this process recorded itself: the reservations asked
	// before it (an earlier epoch) whose slots are before till (on this
	// process's clock; far ahead for a move, which every later slot must
	// honour) were placed without it.
	epoch uint64
	till  time.Time
}

// maxHeard bounds the keys remembered; past it the memory starts afresh, at
// worst letting a waiter send on a shape it could have retaken.
const maxHeard = 10_000

func (h *keyNews) update(skey string, f func(*news)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil || len(h.keys) >= maxHeard {
		h.keys = make(map[string]news)
	}
	n := h.keys[skey]
	f(&n)
	h.keys[skey] = n
	h.any.Store(true)
}

// replied notes what an allowed reservation of skey from the shared store
// says; slot is its slot on the store's clock (0: not known).
func (h *keyNews) replied(skey string, res contract.Reservation, slot int64) {
	moved := res.Reshaped()
	paused := res.Cause == contract.CauseUpstream && slot > 0
	if moved == 0 && !paused {
		return // the common path: no lock
	}
	h.mu.RLock()
	n := h.keys[skey]
	h.mu.RUnlock()
	if moved <= n.moved && (!paused || slot <= n.pausedTill) {
		return // while a learned pace holds, every reply says the same
	}
	h.update(skey, func(n *news) {
		n.moved = max(n.moved, moved)
		if paused {
			n.pausedTill = max(n.pausedTill, slot)
		}
	})
}

// recorded notes a pause this process recorded at now, of length pause,
// and a move to a stricter pace (move).
func (h *keyNews) recorded(skey string, now time.Time, pause time.Duration, move bool) {
	if pause <= 0 && !move {
		return
	}
	till := now.Add(pause)
	if move {
		till = now.Add(MaxPer) // beyond every slot placed before it
	}
	h.update(skey, func(n *news) {
		n.epoch, n.till = h.epoch.Add(1), maxTime(n.till, till)
	})
}

// stale reports whether a's slot, from the shared store, was placed before
// a pause or a move to a stricter pace that this process has heard of since.
func (h *keyNews) stale(a *Admission) bool {
	if !h.any.Load() || a.Verdict.Local || a.g.from == nil {
		return false
	}
	h.mu.RLock()
	n, ok := h.keys[a.k.Key]
	h.mu.RUnlock()
	if !ok {
		return false
	}
	// A reservation decided before the move, and that did not see it
	// (clocks given by clients may disagree).
	decided := a.g.res.Decided()
	return decided > 0 && n.moved > decided && a.g.res.Reshaped() < n.moved ||
		a.storeSlot > 0 && a.storeSlot < n.pausedTill ||
		a.epoch < n.epoch && a.slot.Before(n.till)
}
