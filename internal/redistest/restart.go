package redistest

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// Restart kills a redis-server that StartServer started (SIGKILL, as a
// crash would) and starts it again on the same port and directory. With
// persistence off, it comes back empty: no keys, no cached scripts.
func (s *Server) Restart() error {
	if s.args == nil || s.dir == "" {
		return errors.New("redistest: Restart needs a server started by StartServer")
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
	cmd := exec.Command("redis-server", s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	return waitReady(s.Addr, 5*time.Second)
}
