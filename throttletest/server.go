package throttletest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"
)

// This file is NewServer: a loopback server that times each request when it
// reached the server's socket, so that an Upstream counts it then rather
// than when the server's process got round to it.

// NewServer starts and returns a server of h on a loopback port, as
// httptest.NewServer does, that times the arrival of each request when its
// bytes reached the server's socket: the kernel's receive time on Linux,
// elsewhere when the server read them. An Upstream served by it (h, or a
// handler in front of it) counts each request at that time rather than when
// its handler ran, which on a loaded machine or in a race-instrumented test
// binary may be many milliseconds later and late by different amounts for
// requests that arrived together: a client that kept the limit would then
// meet 429s that are the server's own scheduling. An Upstream with its own
// Config.Now counts on that clock, as it does under any server. The caller
// closes the server.
func NewServer(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	l, err := listen()
	if err != nil {
		srv.Close()
		panic(fmt.Sprintf("throttletest: failed to listen on a port: %v", err)) // as httptest.NewServer
	}
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if sc, ok := c.(*stampedConn); ok {
			return context.WithValue(ctx, connKey{}, sc)
		}
		return ctx
	}
	srv.Start()
	return srv
}

// connKey is the context key of a request's *stampedConn.
type connKey struct{}

// arrived returns when r reached the socket of a NewServer, as its last
// read of r's connection says (the one that completed r's header: the
// server reads the next request only after answering this one); false for
// a request that no NewServer read.
func arrived(r *http.Request) (time.Time, bool) {
	sc, _ := r.Context().Value(connKey{}).(*stampedConn)
	if sc == nil {
		return time.Time{}, false
	}
	ns := sc.last.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// stampListener accepts connections that time what they read.
type stampListener struct{ net.Listener }

func (l stampListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newStampedConn(c), nil
}

// stampedConn is a server's connection that keeps when the bytes of its last
// read arrived (Unix nanoseconds). Reads of one connection are sequential
// (net/http reads from one goroutine at a time), but the handler reads last
// on another goroutine.
type stampedConn struct {
	net.Conn
	last atomic.Int64
	sys  sysConn // the platform's part (server_linux.go)
}
