package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// TestOverrides: both stores keep a rule's override until it expires or is
// cleared, read several rules' in one call, and keep the newest 100
// entries of its history, newest first.
func TestOverrides(t *testing.T) {
	ctx := context.Background()
	mem, err := store.NewMemory()
	require.NoError(t, err)
	rdb, err := store.NewRedis(realRedis(t), store.WithPrefix(fmt.Sprintf("ov%d:", time.Now().UnixNano())))
	require.NoError(t, err)
	for name, st := range map[string]store.Store{"memory": mem, "redis": rdb} {
		t.Run(name, func(t *testing.T) {
			o, ok := st.(contract.Overrides)
			require.True(t, ok)
			got, err := o.Overrides(ctx, []string{"a", "b"})
			require.NoError(t, err)
			assert.Empty(t, got)

			require.NoError(t, o.SetOverride(ctx, "a", []byte("A1"), 0, []byte("set A1")))
			require.NoError(t, o.SetOverride(ctx, "b", []byte("B1"), 50*time.Millisecond, []byte("set B1")))
			got, err = o.Overrides(ctx, []string{"a", "b", "c"})
			require.NoError(t, err)
			assert.Equal(t, map[string][]byte{"a": []byte("A1"), "b": []byte("B1")}, got)

			require.Eventually(t, func() bool {
				got, err = o.Overrides(ctx, []string{"a", "b"})
				return err == nil && len(got) == 1
			}, 2*time.Second, 10*time.Millisecond, "b expires")
			assert.Equal(t, []byte("A1"), got["a"])

			require.NoError(t, o.ClearOverride(ctx, "a", []byte("clear")))
			got, err = o.Overrides(ctx, []string{"a"})
			require.NoError(t, err)
			assert.Empty(t, got)
			for i := range contract.MaxOverrideHistory + 5 {
				require.NoError(t, o.ClearOverride(ctx, "c", fmt.Appendf(nil, "e%d", i)))
			}
			h, err := o.OverrideHistory(ctx, "a")
			require.NoError(t, err)
			assert.Equal(t, [][]byte{[]byte("clear"), []byte("set A1")}, h)
			h, err = o.OverrideHistory(ctx, "c")
			require.NoError(t, err)
			require.Len(t, h, contract.MaxOverrideHistory)
			assert.Equal(t, fmt.Appendf(nil, "e%d", contract.MaxOverrideHistory+4), h[0])

			require.ErrorIs(t, o.SetOverride(ctx, "", []byte("x"), 0, []byte("x")), contract.ErrInvalidRequest)
			require.ErrorIs(t, o.SetOverride(ctx, "a", nil, 0, []byte("x")), contract.ErrInvalidRequest)
			require.ErrorIs(t, o.SetOverride(ctx, "a", []byte("x"), -time.Second, []byte("x")), contract.ErrInvalidRequest)
		})
	}
}
