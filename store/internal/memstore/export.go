package memstore

import "math"

// Accessors for the stores' tests (package store_test, beside the
// conformance suite): the number of keys the store holds, and state
// written as another program would. Nothing else calls them.

// Len returns the number of keys the store holds, expired ones not yet
// dropped included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.logs) + len(m.counters)
}

// InjectEntry appends an entry at (µs) to key's log, as another program's
// RPUSH would: a log it makes has no expiry.
func (m *Memory) InjectEntry(key string, at int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lg := m.logs[key]
	if lg == nil {
		lg = &memLog{expires: math.MaxInt64}
		m.logs[key] = lg
	}
	lg.times = append(lg.times, at)
	return nil
}

// InjectPace sets key's paced time to tat (µs) without an expiry, as
// another program's SET would.
func (m *Memory) InjectPace(key string, tat int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paces == nil {
		m.paces = make(map[string]*memPace)
	}
	m.paces[key] = &memPace{tat: tat, expires: math.MaxInt64}
	return nil
}

// ActiveTenants returns the number of tenants key's state keeps (the
// tenants' set of lanes.lua, less its virtual time).
func (m *Memory) ActiveTenants(key string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.lanes[key]; l != nil {
		return len(l.tenants), nil
	}
	return 0, nil
}
