package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// TestLeaseUsageConformance runs the read of a key's leases and queue on
// every store.
func TestLeaseUsageConformance(t *testing.T) { runCases(t, leaseUsageCases) }

func leaseUsage(t *testing.T, s store.Store, key string) contract.LeaseUsage {
	t.Helper()
	li, ok := s.(contract.LeaseInspector)
	require.True(t, ok, "%T implements contract.LeaseInspector", s)
	u, err := li.LeaseUsage(ctx, key)
	require.NoError(t, err)
	return u
}

var leaseUsageCases = []conformanceCase{
	{"leases held, the queue, expiry, and nothing changed by reading", func(t *testing.T, s store.Store, clock *fakeClock, key string) {
		assert.Equal(t, contract.LeaseUsage{}, leaseUsage(t, s, key), "a key without a cap")
		a := reserve(t, s, key, capped(2, 10*time.Second, 0))
		require.True(t, a.Lease.Held())
		clock.Advance(time.Second)
		b := reserve(t, s, key, capped(2, 10*time.Second, 0))
		require.True(t, b.Lease.Held())
		w1 := reserve(t, s, key, capped(2, 10*time.Second, 5*time.Second))
		require.True(t, w1.Lease.Queued())
		w2 := reserve(t, s, key, capped(2, 10*time.Second, 20*time.Second))
		require.True(t, w2.Lease.Queued())
		assert.Equal(t, contract.LeaseUsage{Held: 2, Queued: 2, Earliest: 9 * time.Second}, leaseUsage(t, s, key))

		clock.Advance(6 * time.Second) // w1's deadline passed: not counted, not removed
		assert.Equal(t, contract.LeaseUsage{Held: 2, Queued: 1, Earliest: 3 * time.Second}, leaseUsage(t, s, key))
		clock.Advance(3500 * time.Millisecond) // a's lease expired: not counted
		assert.Equal(t, contract.LeaseUsage{Held: 1, Queued: 1, Earliest: 500 * time.Millisecond}, leaseUsage(t, s, key))
		assert.Equal(t, leaseUsage(t, s, key), leaseUsage(t, s, key), "reading changes nothing")

		require.NoError(t, leases(t, s).Release(ctx, b.Lease)) // reclaims a's, hands one to w2
		u := leaseUsage(t, s, key)
		assert.Equal(t, 1, u.Held, "w2 holds one")
		assert.Zero(t, u.Queued)
		require.NoError(t, leases(t, s).Release(ctx, w2.Lease))
	}},
	{"an empty key is refused", func(t *testing.T, s store.Store, _ *fakeClock, _ string) {
		_, err := s.(contract.LeaseInspector).LeaseUsage(ctx, "")
		require.ErrorIs(t, err, contract.ErrInvalidRequest)
	}},
}
