package memstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/throttle-go/throttle/internal/contract"
)

// The limits an operator sets at runtime (contract.Overrides) in a Memory
// store: a record per rule that expires on the store's clock, and its
// history, newest first.

var _ contract.Overrides = (*Memory)(nil)

// overrideBoard holds a Memory's overrides, beside it as its published
// rules are (rules_memory.go).
type overrideBoard struct {
	mu      sync.Mutex
	docs    map[string]publishedDoc // expires 0: until cleared
	history map[string][][]byte
}

var overrideBoards sync.Map // weak.Pointer[Memory] → *overrideBoard

func (m *Memory) overrides() *overrideBoard {
	wp := weak.Make(m)
	b, loaded := overrideBoards.LoadOrStore(wp, &overrideBoard{docs: map[string]publishedDoc{}, history: map[string][][]byte{}})
	if !loaded {
		runtime.AddCleanup(m, func(k weak.Pointer[Memory]) { overrideBoards.Delete(k) }, wp)
	}
	return b.(*overrideBoard)
}

func (m *Memory) nowMicros() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.micros()
}

func checkOverride(rule string, docs ...[]byte) error {
	if rule == "" {
		return fmt.Errorf("%w: an override needs a rule name", contract.ErrInvalidRequest)
	}
	for _, d := range docs {
		if len(d) == 0 || len(d) > contract.MaxOverrideDoc {
			return fmt.Errorf("%w: an override's record and history entry take 1 to %d bytes", contract.ErrInvalidRequest, contract.MaxOverrideDoc)
		}
	}
	return nil
}

func (b *overrideBoard) add(rule string, entry []byte) {
	h := append([][]byte{slices.Clone(entry)}, b.history[rule]...)
	b.history[rule] = h[:min(len(h), contract.MaxOverrideHistory)]
}

// SetOverride implements contract.Overrides.
func (m *Memory) SetOverride(_ context.Context, rule string, doc []byte, ttl time.Duration, entry []byte) error {
	if err := checkOverride(rule, doc, entry); err != nil {
		return err
	}
	if ttl < 0 {
		return fmt.Errorf("%w: an override lasts a positive time, or until cleared (0)", contract.ErrInvalidRequest)
	}
	var expires int64
	if ttl > 0 {
		expires = m.nowMicros() + max(1, int64(ttl/time.Microsecond))
	}
	b := m.overrides()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.docs[rule] = publishedDoc{doc: slices.Clone(doc), expires: expires}
	b.add(rule, entry)
	return nil
}

// ClearOverride implements contract.Overrides.
func (m *Memory) ClearOverride(_ context.Context, rule string, entry []byte) error {
	if err := checkOverride(rule, entry); err != nil {
		return err
	}
	b := m.overrides()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.docs, rule)
	b.add(rule, entry)
	return nil
}

// Overrides implements contract.Overrides.
func (m *Memory) Overrides(_ context.Context, rules []string) (map[string][]byte, error) {
	now := m.nowMicros()
	b := m.overrides()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string][]byte{}
	for _, name := range rules {
		d, ok := b.docs[name]
		switch {
		case !ok:
		case d.expires != 0 && d.expires <= now:
			delete(b.docs, name)
		default:
			out[name] = slices.Clone(d.doc)
		}
	}
	return out, nil
}

// OverrideHistory implements contract.Overrides.
func (m *Memory) OverrideHistory(_ context.Context, rule string) ([][]byte, error) {
	b := m.overrides()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([][]byte, len(b.history[rule]))
	for i, e := range b.history[rule] {
		out[i] = slices.Clone(e)
	}
	return out, nil
}
