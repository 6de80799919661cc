package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the redis-server this run started: loopback, a free port, no
// persistence. It is killed when the suite ends, on a signal or a panic, and
// by the kernel if the suite dies (Pdeathsig).
type server struct {
	addr    string
	version string
	cmd     *exec.Cmd
	dir     string
	once    sync.Once
}

func startRedis() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH: %w", err)
	}
	var lastErr error
	for range 5 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		dir, err := os.MkdirTemp("", "throttle-bench-redis")
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no",
			"--loglevel", "warning")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, dir: dir}
		if lastErr = s.waitReady(5 * time.Second); lastErr == nil {
			return s, nil
		}
		s.stop()
	}
	return nil, fmt.Errorf("redis-server did not start: %w", lastErr)
}

func (s *server) waitReady(within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			s.version = infoField(info, "redis_version")
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server; safe to call more than once and from a signal handler.
func (s *server) stop() {
	s.once.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
		_ = os.RemoveAll(s.dir)
	})
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// snapshot is what the server reports about itself at one moment.
type snapshot struct {
	cpu   float64          // used_cpu_sys + used_cpu_user, seconds
	calls map[string]int64 // INFO commandstats calls per command
	usec  map[string]int64 // INFO commandstats microseconds per command
}

func takeSnapshot(ctx context.Context, c *redis.Client) (snapshot, error) {
	info, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return snapshot{}, err
	}
	sys, err1 := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	user, err2 := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	if err1 != nil || err2 != nil {
		return snapshot{}, fmt.Errorf("INFO cpu: unexpected reply")
	}
	s := snapshot{cpu: sys + user, calls: map[string]int64{}, usec: map[string]int64{}}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				s.calls[name] = n
			}
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				s.usec[name] = n
			}
		}
	}
	return s, nil
}

// ownCommand reports whether a command is one the suite itself sends
// (statistics, resets, connection set-up, the PING baseline): those are left
// out of the command counts.
func ownCommand(name string) bool {
	for _, p := range []string{"info", "config", "flushall", "ping", "hello", "client", "memory", "script"} {
		if name == p || strings.HasPrefix(name, p+"|") {
			return true
		}
	}
	return false
}

// commandsSince counts the commands the limiters ran between a and b,
// commands run inside scripts and transactions included (Redis counts those
// one by one in INFO commandstats).
func commandsSince(a, b snapshot) (all int64) {
	for name, n := range b.calls {
		if !ownCommand(name) {
			all += n - a.calls[name]
		}
	}
	return all
}

// reset empties the server and its statistics between rows.
func reset(ctx context.Context, c *redis.Client) error {
	if err := c.FlushAll(ctx).Err(); err != nil {
		return err
	}
	return c.ConfigResetStat(ctx).Err()
}

// tripCounter is a go-redis hook that counts round trips: one per command,
// one per pipeline or transaction.
type tripCounter struct{ n atomic.Int64 }

func (h *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

func newClient(addr string, pool int) (*redis.Client, *tripCounter) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool})
	h := &tripCounter{}
	c.AddHook(h)
	return c, h
}

// openConns makes the pool hold n open connections, so that no connection
// is set up (HELLO, CLIENT SETINFO: round trips the hook counts) while a row
// is measured.
func openConns(ctx context.Context, c *redis.Client, n int) error {
	conns := make([]*redis.Conn, n)
	defer func() {
		for _, cn := range conns {
			if cn != nil {
				_ = cn.Close()
			}
		}
	}()
	for i := range conns {
		conns[i] = c.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}
