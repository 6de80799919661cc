package redisstore

import "github.com/throttle-go/throttle/internal/contract"

var _ contract.Admin = (*Redis)(nil)

// Caps implements contract.Store: the Redis store keeps feedback, leases
// and usage; it is sharded on a Cluster or Ring (Sharded), one clock
// otherwise.
func (r *Redis) Caps() contract.Caps {
	sharded := r.Sharded()
	return contract.Caps{Feedback: true, Leases: true, Usage: true, Sharded: sharded, OneClock: !sharded}
}

// Scripts implements contract.Admin: the package's Scripts.
func (r *Redis) Scripts() map[string]string { return Scripts() }
