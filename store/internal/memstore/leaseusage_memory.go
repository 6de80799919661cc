package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
)

// The leases and queue of a key, read for the operator's tools: the twin
// of the Redis store's LeaseUsage, changing nothing.

var _ contract.LeaseInspector = (*Memory)(nil)

// LeaseUsage implements contract.LeaseInspector.
func (m *Memory) LeaseUsage(_ context.Context, key string) (contract.LeaseUsage, error) {
	if key == "" {
		return contract.LeaseUsage{}, fmt.Errorf("%w: empty key", contract.ErrInvalidRequest)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.micros()
	var u contract.LeaseUsage
	ls := m.lease.keys[key]
	if ls == nil {
		return u, nil
	}
	var earliest int64
	for _, exp := range ls.held {
		if exp > now {
			u.Held++
			if earliest == 0 || exp < earliest {
				earliest = exp
			}
		}
	}
	if earliest > 0 {
		u.Earliest = time.Duration(earliest-now) * time.Microsecond
	}
	q := ls.queue
	if len(q) > contract.MaxQueueRead {
		q, u.QueueMore = q[:contract.MaxQueueRead], true
	}
	for _, w := range q {
		if w.deadline > now {
			u.Queued++
		}
	}
	return u, nil
}
