package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/store/internal/script"
)

// TestRun writes every script, rewrites a stale one and removes a file left
// over from a script that no longer exists.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), script.Dir)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gone.lua"), []byte("return 1\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cancel.lua"), []byte("return 2\n"), 0o644))
	require.NoError(t, run(dir))

	want, err := script.Files(script.All())
	require.NoError(t, err)
	got, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	assert.Len(t, got, len(want))
	for name, content := range want {
		have, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err, name)
		assert.Equal(t, content, string(have), name)
	}
}
