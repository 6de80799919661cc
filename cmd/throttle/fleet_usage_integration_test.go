//go:build integration

package main

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
)

// fleetProc is one process of testdata/fleet.
type fleetProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startFleet builds testdata/fleet and starts n processes of it on the
// redis-server at addr, with args.
func startFleet(t *testing.T, addr string, n int, args ...string) []*fleetProc {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleet")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/fleet").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var ps []*fleetProc
	for range n {
		cmd := exec.Command(bin, append([]string{"-redis", addr}, args...)...)
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		p := &fleetProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
		ps = append(ps, p)
		t.Cleanup(func() {
			_ = p.stdin.Close() // the process closes its Transport and exits
			_ = p.cmd.Wait()
		})
	}
	return ps
}

// line returns the next line p prints that starts with prefix.
func (p *fleetProc) line(t *testing.T, prefix string) string {
	t.Helper()
	for p.out.Scan() {
		if l := p.out.Text(); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("the process ended before printing %q: %v", prefix, p.out.Err())
	return ""
}

var doneLine = regexp.MustCompile(`^done sent=(\d+) limited=(\d+) other=(\d+)$`)

// TestFleetUsagePublished runs a fleet of three processes of four workers,
// each sending 30 requests under a rule of 200 per hour that never waits,
// against a real redis-server. Then `throttle usage`, given only the rule
// and the key, finds the definition the processes publish and reports the
// units their decision hooks say they sent; a wrong key says "no state".
func TestFleetUsagePublished(t *testing.T) {
	srv, err := redistest.StartServer()
	if err != nil {
		if redistest.InCI() {
			t.Fatal(err)
		}
		t.Skipf("needs redis-server: %v", err)
	}
	defer srv.Close()
	ps := startFleet(t, srv.Addr, 3, "-workers", "4", "-requests", "30", "-limit", "200")
	sent, limited := 0, 0
	for _, p := range ps {
		m := doneLine.FindStringSubmatch(p.line(t, "done "))
		require.NotNil(t, m)
		s, _ := strconv.Atoi(m[1])
		l, _ := strconv.Atoi(m[2])
		require.Equal(t, "0", m[3], "neither canceled nor failed")
		sent, limited = sent+s, limited+l
	}
	t.Logf("the processes' hooks: sent %d, limited %d", sent, limited)
	require.Equal(t, 3*4*30, sent+limited)

	url := "redis://" + srv.Addr + "/0"
	code, out, errOut := runCLI("usage", "-redis", url, "-rule", "fleet", "-key", "gw")
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	t.Logf("throttle usage:\n%s", out)
	assert.Contains(t, out, "definition: published")
	m := regexp.MustCompile(`(?m)^\s+200/1h\s+\S+\s+(\d+)/200\s+(\d+)$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	used, _ := strconv.Atoi(m[1])
	assert.Equal(t, sent, used, "usage reports what the processes decided to send")
	assert.Equal(t, 200, used, "the fleet sent its whole limit, and no more")
	assert.Equal(t, "0", m[2], "nothing reserved ahead")

	code, out, errOut = runCLI("usage", "-redis", url, "-rule", "fleet", "-key", "gw2")
	assert.Equal(t, exitFailed, code, "%s%s", out, errOut)
	assert.Contains(t, out, "no state under")
}
