// Package redistest starts Redis servers for tests: a real redis-server from
// PATH on a free loopback port, or the server at REDIS_ADDR, or, when neither
// is there and CI is not set, an embedded miniredis (and says so).
package redistest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is a running Redis.
type Server struct {
	Addr string
	// Real is false when the server is an embedded miniredis.
	Real bool
	// TLS is the client configuration of a server that speaks only TLS
	// (StartTLS), nil for plain TCP.
	TLS *tls.Config

	cmd  *exec.Cmd
	mini *miniredis.Miniredis
	dir  string
	args []string // redis-server's arguments, for Restart
}

// Close stops the server. It is safe to call more than once.
func (s *Server) Close() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
	if s.mini != nil {
		s.mini.Close()
		s.mini = nil
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
		s.dir = ""
	}
}

// Client returns a client of s, closed at the end of the test.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartServer starts redis-server from PATH on a free loopback port with
// persistence off. The server is killed when this process dies, too.
func StartServer(extraArgs ...string) (*Server, error) {
	return startServer(nil, func(port string) []string { return []string{"--port", port} }, extraArgs)
}

// startServer starts redis-server listening as listen says on a free port,
// and waits until it answers, over TLS when tlsConfig is set.
func startServer(tlsConfig *tls.Config, listen func(port string) []string, extraArgs []string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redistest")
		if err != nil {
			return nil, err
		}
		args := append(listen(strconv.Itoa(port)), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--daemonize", "no", "--loglevel", "warning")
		args = append(args, extraArgs...)
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Real: true, TLS: tlsConfig, cmd: cmd, dir: dir, args: args}
		if lastErr = waitReady(s.Addr, tlsConfig, 5*time.Second); lastErr == nil {
			return s, nil
		}
		s.Close()
	}
	return nil, fmt.Errorf("redistest: redis-server did not start: %w", lastErr)
}

// waitReady waits until the server at addr answers, over TLS when tlsConfig
// is set. A server with requirepass answers NOAUTH: it is ready.
func waitReady(addr string, tlsConfig *tls.Config, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, TLSConfig: tlsConfig})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || redis.HasErrorPrefix(err, "NOAUTH") || redis.HasErrorPrefix(err, "WRONGPASS") {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	sharedMu sync.Mutex
	shared   *Server
)

// Shared returns the Redis of this test binary, started on first use: the
// server at REDIS_ADDR when set, else a redis-server from PATH, else (outside
// CI) an embedded miniredis, with a log line saying so. In CI (CI set to
// anything but "" or "false") a missing redis-server fails the test: Redis
// tests must not quietly run against a stand-in there.
//
// Tests share the server, so each must use keys of its own. Call StopShared
// from TestMain after m.Run.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		if !shared.Real {
			tb.Log("redistest: no redis-server on PATH: using embedded miniredis")
		}
		return shared
	}
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		shared = &Server{Addr: addr, Real: true}
		return shared
	}
	s, err := StartServer()
	switch {
	case err == nil:
		shared = s
	case InCI():
		tb.Fatalf("redistest: CI is set but redis-server could not be started: %v", err)
	default:
		m, merr := miniredis.Run()
		if merr != nil {
			tb.Fatalf("redistest: no redis-server (%v) and miniredis failed: %v", err, merr)
		}
		shared = &Server{Addr: m.Addr(), mini: m}
		tb.Log("redistest: no redis-server on PATH: using embedded miniredis")
	}
	return shared
}

// StopShared stops the server Shared started, if any.
func StopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Close()
		shared = nil
	}
}

// InCI reports whether CI is set (to anything but "", "false" or "0"): then
// Redis tests must fail, not skip or fall back, without a redis-server.
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// Mini starts an embedded miniredis for one test.
func Mini(tb testing.TB) *Server {
	m, err := miniredis.Run()
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: m.Addr(), mini: m}
	tb.Cleanup(s.Close)
	return s
}

// Start starts a redis-server of the test's own with extraArgs (StartServer),
// stopped at the end of the test. Without a redis-server it skips the test,
// or fails it in CI: tests that need a real server's features (ACL, TLS,
// maxmemory, MONITOR) must not quietly pass there.
func Start(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	s, err := StartServer(extraArgs...)
	if err != nil {
		if InCI() {
			tb.Fatalf("redistest: CI is set but redis-server could not be started: %v", err)
		}
		tb.Skipf("needs a real redis-server on PATH: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}
