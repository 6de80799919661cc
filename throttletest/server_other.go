//go:build !linux

package throttletest

import (
	"net"
	"time"
)

// listen listens on a loopback port; without the kernel's receive time, a
// read is timed when it returns.
func listen() (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		if l, err = net.Listen("tcp6", "[::1]:0"); err != nil {
			return nil, err
		}
	}
	return stampListener{l}, nil
}

type sysConn struct{}

func newStampedConn(c net.Conn) *stampedConn { return &stampedConn{Conn: c} }

// Read reads as net.Conn's Read and keeps the time it returned.
func (c *stampedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}
