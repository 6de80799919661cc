package store

import "github.com/throttle-go/throttle/internal/contract"

var (
	_ contract.Store = (*Redis)(nil)
	_ contract.Store = (*Memory)(nil)
)

// Caps implements contract.Store: the Redis store keeps feedback, leases
// and usage; it is sharded on a Cluster or Ring (Sharded), one clock
// otherwise.
func (r *Redis) Caps() contract.Caps {
	sharded := r.Sharded()
	return contract.Caps{Feedback: true, Leases: true, Usage: true, Sharded: sharded, OneClock: !sharded}
}

// Caps implements contract.Store: the Memory store keeps everything, in
// this process, on one clock.
func (m *Memory) Caps() contract.Caps {
	return contract.Caps{Feedback: true, Leases: true, Usage: true, OneClock: true, InProcess: true}
}
