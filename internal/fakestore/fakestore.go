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

// Store wraps a store (a store.Memory by default) and fails on demand. It
// implements contract.Feedback through the inner store's, if it has one. It is
// safe for concurrent use.
type Store struct {
	inner store.Store

	mu          sync.Mutex
	err         error         // non-nil: Reserve fails with it ...
	dial        time.Duration // ... after this long (a connect timeout)
	learnErr    error
	onReserve   func(ctx context.Context)
	calls       []time.Time
	inflight    int
	maxInflight int
}

// New returns a working Store on a fresh store.Memory.
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

// WithoutFeedback returns s as a store.Store that does not implement
// contract.Feedback.
func (s *Store) WithoutFeedback() store.Store { return plain{s} }

type plain struct{ s *Store }

func (p plain) Reserve(ctx context.Context, key string, req contract.Request) (contract.Reservation, error) {
	return p.s.Reserve(ctx, key, req)
}
func (p plain) Cancel(ctx context.Context, r contract.Reservation) error { return p.s.Cancel(ctx, r) }

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
	if fb, ok := s.inner.(contract.Feedback); ok {
		return fb.Learn(ctx, key, l)
	}
	return nil
}

var (
	_ store.Store       = (*Store)(nil)
	_ contract.Feedback = (*Store)(nil)
)
