package throttle_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeQuickStart: the README's quick start is examples/quickstart, which
// the build compiles, so the code a newcomer copies compiles as written.
func TestReadmeQuickStart(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	program, err := os.ReadFile("examples/quickstart/main.go")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(readme), "## Quick start")
	require.True(t, ok, "the README has a Quick start section")
	_, rest, ok = strings.Cut(rest, "```go\n")
	require.True(t, ok, "the Quick start has a Go block")
	block, _, ok := strings.Cut(rest, "```\n")
	require.True(t, ok)
	require.Equal(t, string(program), block, "README.md's quick start and examples/quickstart/main.go differ")
}
