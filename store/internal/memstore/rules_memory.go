package memstore

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/throttle-go/throttle/internal/contract"
)

// The rules the processes of a Memory store publish (contract.Rules): one
// process, unless tests share the store; a record expires on the store's
// clock.

var _ contract.Rules = (*Memory)(nil)

// published holds the records; it has a lock of its own, as the records
// share nothing with the logs.
type published struct {
	mu   sync.Mutex
	docs map[string]publishedDoc
}

type publishedDoc struct {
	doc     []byte
	expires int64 // micros
}

// boards holds each Memory's records, beside it rather than in it (the
// records are an operator's, not the algorithms'): weak.Pointer[Memory] →
// *published, dropped when the Memory is collected.
var boards sync.Map

func (m *Memory) board() *published {
	wp := weak.Make(m)
	b, loaded := boards.LoadOrStore(wp, &published{docs: map[string]publishedDoc{}})
	if !loaded {
		runtime.AddCleanup(m, func(k weak.Pointer[Memory]) { boards.Delete(k) }, wp)
	}
	return b.(*published)
}

// PublishRules implements contract.Rules.
func (m *Memory) PublishRules(_ context.Context, process string, doc []byte, ttl time.Duration) error {
	if process == "" || len(doc) > contract.MaxRulesDoc || ttl <= 0 {
		return fmt.Errorf("%w: a record of rules needs a process, at most %d bytes and a positive TTL", contract.ErrInvalidRequest, contract.MaxRulesDoc)
	}
	m.mu.Lock()
	now := m.micros()
	m.mu.Unlock()
	b := m.board()
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, d := range b.docs {
		if d.expires <= now {
			delete(b.docs, p)
		}
	}
	b.docs[process] = publishedDoc{doc: append([]byte(nil), doc...), expires: now + int64(ttl/time.Microsecond)}
	return nil
}

// UnpublishRules implements contract.Rules.
func (m *Memory) UnpublishRules(_ context.Context, process string) error {
	b := m.board()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.docs, process)
	return nil
}

// PublishedRules implements contract.Rules.
func (m *Memory) PublishedRules(context.Context) (map[string][]byte, error) {
	m.mu.Lock()
	now := m.micros()
	m.mu.Unlock()
	b := m.board()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]byte, len(b.docs))
	for p, d := range b.docs {
		if d.expires > now {
			out[p] = append([]byte(nil), d.doc...)
		}
	}
	return out, nil
}
