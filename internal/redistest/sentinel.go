package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel starts a Redis Sentinel of the test's own on a free loopback
// port that monitors the server at masterAddr as master, with a quorum of 1,
// and waits until it knows the master. It is stopped at the end of the test.
// Without a redis-server it skips the test, or fails it in CI.
func StartSentinel(tb testing.TB, master, masterAddr string) *Server {
	tb.Helper()
	fail := func(err error) {
		if InCI() {
			tb.Fatalf("redistest: CI is set but redis-server --sentinel could not be started: %v", err)
		}
		tb.Skipf("needs redis-server on PATH for a Sentinel: %v", err)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fail(err)
	}
	port, err := FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "redistest-sentinel")
	if err != nil {
		tb.Fatal(err)
	}
	host, mport, err := net.SplitHostPort(masterAddr)
	if err != nil {
		tb.Fatal(err)
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 5000\n",
		port, dir, master, host, mport, master)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel", "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		fail(err)
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Real: true, cmd: cmd, dir: dir}
	tb.Cleanup(s.Close)
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		addr, err := c.GetMasterAddrByName(ctx, master).Result()
		cancel()
		if err == nil && len(addr) == 2 {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: the Sentinel never knew %s: %v", master, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
