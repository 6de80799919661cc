//go:build integration

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// TestFleetUsage runs the payments example fleet (two processes, 100 per
// second on key pg1) against a real redis-server, and reads its key while it
// runs with `throttle usage` and `throttle watch -for 2s`: no window ever
// holds more than the limit, and the fleet, which always has requests
// waiting, keeps the window busy.
func TestFleetUsage(t *testing.T) {
	srv, err := redistest.StartServer()
	if err != nil {
		if redistest.InCI() {
			t.Fatal(err)
		}
		t.Skipf("needs redis-server: %v", err)
	}
	defer srv.Close()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "payments")
	out, err := exec.Command(goBin, "build", "-o", bin, "../../examples/payments").CombinedOutput()
	require.NoError(t, err, "%s", out)

	var procs []*exec.Cmd
	var logs []*bytes.Buffer
	for range 2 {
		var buf bytes.Buffer
		cmd := exec.Command(bin, "-redis", srv.Addr, "-workers", "4", "-duration", "6s", "-rate", "100", "-per", "1s")
		cmd.Stdout, cmd.Stderr = &buf, &buf
		require.NoError(t, cmd.Start())
		procs, logs = append(procs, cmd), append(logs, &buf)
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
		}
	}()
	time.Sleep(1500 * time.Millisecond) // the fleet is under way

	url := "redis://" + srv.Addr + "/0"
	key := []string{"-redis", url, "-rule", "payments", "-limit", "100/1s", "-key", "pg1"}
	code, usageOut, errOut := runCLI(append([]string{"usage"}, key...)...)
	require.Equal(t, 0, code, errOut)
	t.Logf("throttle usage:\n%s", usageOut)
	m := regexp.MustCompile(`(?m)^\s+100/1s\s+1.005s\s+(\d+)/100\s+(\d+)$`).FindStringSubmatch(usageOut)
	require.NotNil(t, m, usageOut)
	used, _ := strconv.Atoi(m[1])
	assert.LessOrEqual(t, used, 100)
	assert.Positive(t, used)

	code, watchOut, errOut := runCLI(append([]string{"watch", "-every", "250ms", "-for", "2s"}, key...)...)
	require.Equal(t, 0, code, errOut)
	t.Logf("throttle watch:\n%s", watchOut)
	var lines []string // the samples: after the definition it used and what it watches
	for _, l := range strings.Split(strings.TrimSpace(watchOut), "\n") {
		if l != "" && l[0] >= '0' && l[0] <= '9' {
			lines = append(lines, l)
		}
	}
	require.GreaterOrEqual(t, len(lines), 2)
	// The default pace's field follows the window's.
	re := regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3}  100/1s (\d+)/100( \+\d+)?  default 100/1.005s/paced\+9 \d+/10( \+\d+)?  next (\S+)  pause none$`)
	busiest := 0
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		require.NotNil(t, m, l)
		n, _ := strconv.Atoi(m[1])
		assert.LessOrEqual(t, n, 100, l)
		busiest = max(busiest, n)
	}
	// Eight workers that always wait for a slot fill the window; how full
	// a sample finds it depends on the machine, so only half is asked.
	assert.GreaterOrEqual(t, busiest, 50, watchOut)

	for i, p := range procs {
		require.NoError(t, p.Wait(), "process %d:\n%s", i, logs[i])
		assert.Contains(t, logs[i].String(), "429=0", "process %d", i)
	}
	if testing.Verbose() {
		os.Stderr.WriteString(logs[0].String())
	}
}

// TestClusterURL runs every command on a real Redis Cluster through a
// redis-cluster:// URL, as store.NewRedisURL reads it: the key's state is
// found, shown and deleted on the node that holds it, and check passes.
func TestClusterURL(t *testing.T) {
	cl := redistest.StartCluster(t)
	url := "redis-cluster://" + cl.Addrs()[0]
	for _, a := range cl.Addrs()[1:] {
		if strings.Contains(url, "?") {
			url += "&addr=" + a
		} else {
			url += "?addr=" + a
		}
	}
	rule := "cluster" + strconv.FormatInt(time.Now().UnixNano(), 10)
	key := []string{"-redis", url, "-rule", rule, "-limit", "10/1m", "-key", "pg1"}

	// Three reservations on the same Cluster, as a transport makes them.
	st, err := store.NewRedis(cl.Client(t))
	require.NoError(t, err)
	for range 3 {
		res, err := st.Reserve(context.Background(), rule+":pg1",
			contract.Request{Limits: []contract.Limit{{N: 10, Per: time.Minute + engine.DefaultMargin}}, Cost: 1})
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}

	code, out, errOut := runCLI(append([]string{"usage"}, key...)...)
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `(?m)^\s+10/1m\s+1m0.005s\s+3/10\s+0$`, out)

	code, out, errOut = runCLI("check", "-redis", url)
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	assert.Contains(t, out, "redis-cluster://"+cl.Addrs()[0])

	code, out, errOut = runCLI(append([]string{"reset", "-yes"}, key...)...)
	require.Equal(t, exitOK, code, "%s%s", out, errOut)
	code, out, errOut = runCLI(append([]string{"usage"}, key...)...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "was reset or lost while the fleet ran", "the reset log's mark is left: its next reservation waits out the window")
}
