package throttletest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// listen listens on a loopback port with SO_TIMESTAMPNS set, which the
// connections it accepts inherit: each read on them returns the time the
// kernel received the data read.
func listen() (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		if l, err = lc.Listen(context.Background(), "tcp6", "[::1]:0"); err != nil {
			return nil, err
		}
	}
	return stampListener{l}, nil
}

// sysConn reads a TCP connection with recvmsg, for the receive time.
type sysConn struct {
	rc  syscall.RawConn // nil: not a TCP connection, read it as it is
	oob [64]byte        // a cmsg of SCM_TIMESTAMPNS takes 32
}

func newStampedConn(c net.Conn) *stampedConn {
	sc := &stampedConn{Conn: c}
	if tc, ok := c.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			sc.sys.rc = rc
		}
	}
	return sc
}

// Read reads as net.Conn's Read, through the poller (deadlines hold), and
// keeps the kernel's receive time of what it read, or the time it returned
// when the kernel gave none.
func (c *stampedConn) Read(b []byte) (int, error) {
	if c.sys.rc == nil || len(b) == 0 {
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.last.Store(time.Now().UnixNano())
		}
		return n, err
	}
	var n, oobn int
	var err error
	rerr := c.sys.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, err = syscall.Recvmsg(int(fd), b, c.sys.oob[:], 0)
			if err != syscall.EINTR {
				return err != syscall.EAGAIN
			}
		}
	})
	switch {
	case rerr != nil:
		return 0, rerr // a deadline, or the connection closed: a *net.OpError
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("recvmsg", err)}
	case n == 0:
		return 0, io.EOF
	}
	c.last.Store(received(c.sys.oob[:oobn], time.Now()))
	return n, nil
}

// received returns the time in a SCM_TIMESTAMPNS control message of oob
// (Unix nanoseconds), or now's when there is none.
func received(oob []byte, now time.Time) int64 {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return now.UnixNano()
	}
	for _, m := range msgs {
		if m.Header.Level != syscall.SOL_SOCKET || m.Header.Type != syscall.SCM_TIMESTAMPNS {
			continue
		}
		var sec, nsec int64
		switch len(m.Data) { // a struct timespec: 64-bit fields, or 32-bit on 32-bit platforms
		case 16:
			sec, nsec = int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:]))
		case 8:
			sec, nsec = int64(int32(binary.NativeEndian.Uint32(m.Data))), int64(int32(binary.NativeEndian.Uint32(m.Data[4:])))
		default:
			continue
		}
		if sec > 0 {
			return time.Unix(sec, nsec).UnixNano()
		}
	}
	return now.UnixNano()
}
