package memstore

import "github.com/throttle-go/throttle/internal/contract"

// Caps implements contract.Store: the Memory store keeps everything, in
// this process, on one clock.
func (m *Memory) Caps() contract.Caps {
	return contract.Caps{Feedback: true, Leases: true, Usage: true, OneClock: true, InProcess: true}
}

var _ contract.Store = (*Memory)(nil)
