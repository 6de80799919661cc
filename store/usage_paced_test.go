package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/store"
)

// TestUsageRefusesPaced: Usage does not read a paced limit's state, and says
// so rather than answer without it.
func TestUsageRefusesPaced(t *testing.T) {
	t.Parallel()
	m, err := store.NewMemory()
	require.NoError(t, err)
	_, err = m.Usage(context.Background(), "k", store.Request{Limits: []store.Limit{{N: 10, Per: time.Second, Paced: true}}})
	require.ErrorIs(t, err, store.ErrInvalidRequest)
}
