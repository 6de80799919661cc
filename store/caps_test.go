package store_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/throttle-go/throttle/internal/contract"
)

// TestCaps: every store keeps feedback, leases and usage; the Memory store
// alone is in process; a Cluster is sharded, on clocks of its own.
func TestCaps(t *testing.T) {
	t.Parallel()
	for _, s := range impls(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			want := contract.Caps{Feedback: true, Leases: true, Usage: true, OneClock: true}
			switch s.name {
			case "memory":
				want.InProcess = true
			case "redis-cluster":
				want.Sharded, want.OneClock = true, false
			}
			assert.Equal(t, want, s.open(t, nil).Caps())
		})
	}
}
