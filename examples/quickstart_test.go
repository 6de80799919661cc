//go:build integration

package examples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQuickstartRuns: the README's quick start, built and run with no flags
// and an empty environment (no Redis, no network beyond loopback), succeeds
// and says what it did.
func TestQuickstartRuns(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "quickstart")
	out, err := exec.Command(goBin, "build", "-o", bin, "./quickstart").CombinedOutput()
	require.NoError(t, err, "go build ./quickstart:\n%s", out)
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `^20 requests at 10 per second in \d+\.\ds\n$`, string(out))
}
