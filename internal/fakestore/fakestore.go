// Package fakestore is the one fake store.Store of the throttle tests: an
// in-memory store that can be taken down, made slow, made to fail its
// feedback, or hidden behind a store without feedback, and that records its
// calls.
package fakestore

import (
	"context"
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// Store wraps a store (a memory store by default) and fails on demand. It
// keeps feedback through the inner store; it keeps no leases and reports no
// usage (Caps), as a store of its own would not. It is safe for concurrent
// use.
type Store struct {
	inner store.Store

	mu          sync.Mutex
	err         error         // non-nil: Reserve fails with it ...
	dial        time.Duration // ... after this long (a connect timeout)
	learnErr    error
	settleErr   error
	onReserve   func(ctx context.Context)
	calls       []time.Time
	inflight    int
	maxInflight int
}

// New returns a working Store on a fresh memory store.
func New() *Store {
	m, err := store.NewMemory()
	if err != nil {
		panic(err) // NewMemory fails only for a bad option
	}
	return Wrap(m)
}

// Wrap returns a working Store on inner.
func Wrap(inner store.Store) *Store { return &Store{inner: inner} }

// Fail makes every Reserve fail with err after dial (on the context's
// terms); a nil err makes the store work again.
func (s *Store) Fail(err error, dial time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.dial = err, dial
}

// FailLearn makes every Learn and Pause fail with err (nil: work again).
func (s *Store) FailLearn(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.learnErr = err
}

// FailSettle makes every Settle fail with err (nil: work again).
func (s *Store) FailSettle(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleErr = err
}

// OnReserve calls f with the caller's context at the start of every Reserve.
func (s *Store) OnReserve(f func(ctx context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onReserve = f
}

// Calls returns when each Reserve was called, and the most that were in
// flight at once.
func (s *Store) Calls() (times []time.Time, maxInflight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.calls...), s.maxInflight
}

// Inner returns the store s wraps.
func (s *Store) Inner() store.Store { return s.inner }

// WithoutFeedback returns s as a store.Store that keeps no feedback: its
// Caps says so, and its Pause and Learn return contract.ErrUnsupported.
func (s *Store) WithoutFeedback() store.Store { return plain{s} }

type plain struct{ *Store }

// Caps implements contract.Store: nothing.
func (plain) Caps() contract.Caps { return contract.Caps{} }

// Pause implements contract.Feedback: unsupported.
func (plain) Pause(context.Context, string, time.Duration) error { return contract.ErrUnsupported }

// Learn implements contract.Feedback: unsupported.
func (plain) Learn(context.Context, string, contract.Learned) error { return contract.ErrUnsupported }

// Reserve implements store.Store.
func (s *Store) Reserve(ctx context.Context, key string, req contract.Request) (contract.Reservation, error) {
	s.mu.Lock()
	s.calls = append(s.calls, time.Now())
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	err, dial, hook := s.err, s.dial, s.onReserve
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	if hook != nil {
		hook(ctx)
	}
	if err != nil && dial <= 0 {
		return contract.Reservation{}, err
	}
	if err != nil {
		t := time.NewTimer(dial)
		defer t.Stop()
		select {
		case <-t.C:
			return contract.Reservation{}, err
		case <-ctx.Done():
			return contract.Reservation{}, ctx.Err()
		}
	}
	return s.inner.Reserve(ctx, key, req)
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, r contract.Reservation) error {
	return s.inner.Cancel(ctx, r)
}

// Settle implements contract.Settler.
func (s *Store) Settle(ctx context.Context, r contract.Reservation, actual []int64) error {
	s.mu.Lock()
	err := s.settleErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.inner.Settle(ctx, r, actual)
}

// Pause implements contract.Feedback.
func (s *Store) Pause(ctx context.Context, key string, d time.Duration) error {
	return s.Learn(ctx, key, contract.Learned{Pause: d})
}

// Learn implements contract.Feedback.
func (s *Store) Learn(ctx context.Context, key string, l contract.Learned) error {
	s.mu.Lock()
	err := s.learnErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.inner.Learn(ctx, key, l)
}

// Caps implements contract.Store: feedback only.
func (s *Store) Caps() contract.Caps { return contract.Caps{Feedback: true} }

// Await implements contract.Leases: unsupported.
func (s *Store) Await(context.Context, contract.Lease) (contract.Lease, error) {
	return contract.Lease{}, contract.ErrUnsupported
}

// Release implements contract.Leases: unsupported.
func (s *Store) Release(context.Context, contract.Lease) error { return contract.ErrUnsupported }

// Renew implements contract.Leases: unsupported.
func (s *Store) Renew(context.Context, contract.Lease) error { return contract.ErrUnsupported }

// Usage implements contract.Inspector: unsupported.
func (s *Store) Usage(context.Context, string, contract.Request) (contract.Usage, error) {
	return contract.Usage{}, contract.ErrUnsupported
}

var (
	_ store.Store = (*Store)(nil)
	_ store.Store = plain{}
)
