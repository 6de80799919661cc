package redistest

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Kill stops a redis-server that StartServer started with SIGKILL, as a crash
// would, and waits for it to exit. Its address and data directory stay, so
// that Restart can start it again on the same port. It fails for a server
// this package did not start (REDIS_ADDR, miniredis).
func (s *Server) Kill() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redistest: Kill: not a redis-server started by StartServer, or closed")
	}
	if s.cmd.ProcessState != nil {
		return nil // already dead
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait() // "signal: killed"
	return nil
}

// Restart starts the redis-server again with the same arguments, on the same
// port, killing it first (as a crash would) if it still runs, and waits until
// it answers PING. With persistence off (the default of StartServer) it comes
// back empty, as a restarted cache does: no keys, no cached scripts.
func (s *Server) Restart() error {
	if s.cmd == nil || s.args == nil {
		return errors.New("redistest: Restart: not a redis-server started by StartServer, or closed")
	}
	if err := s.Kill(); err != nil {
		return err
	}
	cmd := exec.Command(s.cmd.Path, s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: Restart: %w", err)
	}
	s.cmd = cmd
	// Another process may have taken the port meanwhile; then the server
	// exits and the wait fails.
	if err := waitReady(s.Addr, nil, 5*time.Second); err != nil {
		return fmt.Errorf("redistest: Restart on %s: %w", s.Addr, err)
	}
	return nil
}
