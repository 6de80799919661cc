// Package jitterproxy is a network path for the fleet tests: an HTTP proxy
// on loopback that holds each request for a random transit time before
// forwarding it to the upstream behind it, and the first request of each
// new connection for a handshake on top. The client sees none of it: its
// connection is accepted at once (net/http's GotConn fires before any of
// the delay), as on a path through a proxy that finishes its own handshake
// after the client's. Like nginx (keepalive_requests), it closes a
// connection after a number of requests, so that clients keep opening new
// ones.
package jitterproxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"
)

// Path is how the proxy delays requests.
type Path struct {
	// Min and Max bound each request's transit, drawn uniformly in [Min,
	// Max]: 5 ± 3 ms is Min 2ms, Max 8ms.
	Min, Max time.Duration
	// Handshake is added to the first request of every new connection.
	Handshake time.Duration
	// KeepAlive, if positive, closes a connection after that many
	// requests (the last is answered with Connection: close).
	KeepAlive int
}

// Proxy forwards the requests it receives to one upstream.
type Proxy struct {
	path   Path
	srv    *http.Server
	ln     net.Listener
	rp     *httputil.ReverseProxy
	conns  atomic.Int64 // connections accepted
	served chan struct{}
}

type connKey struct{}

// conn is what the proxy knows of one client connection.
type conn struct{ requests atomic.Int64 }

// Start listens on a free loopback port and forwards every request to
// target (an http URL) along p. Close stops it.
func Start(target string, p Path) (*Proxy, error) {
	if p.Min < 0 || p.Max < p.Min || p.Handshake < 0 || p.KeepAlive < 0 {
		return nil, errors.New("jitterproxy: want 0 <= Min <= Max, Handshake >= 0 and KeepAlive >= 0")
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	x := &Proxy{path: p, ln: ln, served: make(chan struct{})}
	up := http.DefaultTransport.(*http.Transport).Clone()
	up.MaxIdleConnsPerHost = 64 // the proxy's own connections add no handshake
	x.rp = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(u) },
		Transport: up,
	}
	x.srv = &http.Server{
		Handler: http.HandlerFunc(x.serve),
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			x.conns.Add(1)
			return context.WithValue(ctx, connKey{}, &conn{})
		},
	}
	go func() {
		defer close(x.served)
		_ = x.srv.Serve(ln)
	}()
	return x, nil
}

// URL is the proxy's base URL.
func (x *Proxy) URL() string { return "http://" + x.ln.Addr().String() }

// Conns returns how many connections the proxy accepted.
func (x *Proxy) Conns() int { return int(x.conns.Load()) }

// Close stops the proxy and closes its connections.
func (x *Proxy) Close() {
	_ = x.srv.Close()
	<-x.served
	x.rp.Transport.(*http.Transport).CloseIdleConnections()
}

// serve holds r for its transit (and the handshake, first on its
// connection), then forwards it.
func (x *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(*conn)
	d := x.transit()
	if c != nil {
		n := c.requests.Add(1)
		if n == 1 {
			d += x.path.Handshake
		}
		if x.path.KeepAlive > 0 && n >= int64(x.path.KeepAlive) {
			w.Header().Set("Connection", "close")
		}
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		return
	}
	x.rp.ServeHTTP(w, r)
}

// transit draws one request's transit in [Min, Max].
func (x *Proxy) transit() time.Duration {
	span := x.path.Max - x.path.Min
	if span <= 0 {
		return x.path.Min
	}
	return x.path.Min + rand.N(span+1)
}
