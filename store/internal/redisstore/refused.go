package redisstore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// A refused connection is reported as it is, at once. go-redis retries a
// dial that fails (DialerRetries, 5 by default, 100 ms apart) and then the
// command (MaxRetries, 3), about 2 s against a closed port, and it dials on a
// goroutine of its own, whose context is not the caller's: a caller's
// deadline ends the wait, and the refusal is lost. So NewRedis adds a dial
// hook to a *redis.Client (a single server or a Sentinel failover client):
// a dial that nobody answers (connection refused, host or network
// unreachable, unknown host) ends every call of the store in flight with
// that error, since every one of them would meet it. A dial that times out
// does not: a slow server is left to the caller's timeout. Cluster and Ring
// clients, whose nodes are many, keep go-redis's retries.

// dialError is the error of a call ended by a dial that nobody answered. It
// unwraps to the dial's error (a *net.OpError: errors.Is
// syscall.ECONNREFUSED when the connection was refused).
type dialError struct{ err error }

func (e *dialError) Error() string { return "cannot connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// unanswered reports whether a dial's error says that nobody is there.
func unanswered(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.As(err, &dns) && dns.IsNotFound
}

// refusals ends the calls in flight when a dial is refused. Each call
// watches the current generation, a context that the hook cancels with the
// dial's error and replaces; a nil *refusals watches nothing.
type refusals struct {
	gen    atomic.Pointer[generation]
	client *redis.Client
}

// generation is one context that a refused dial cancels.
type generation struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newGeneration() *generation {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &generation{ctx, cancel}
}

// watchRefusals installs the hook on client when it is a *redis.Client.
func watchRefusals(client redis.Scripter) *refusals {
	c, ok := client.(*redis.Client)
	if !ok {
		return nil
	}
	f := &refusals{client: c}
	f.gen.Store(newGeneration())
	c.AddHook(f)
	return f
}

// refused ends the calls watching the current generation with err.
func (f *refusals) refused(err error) {
	g := f.gen.Swap(newGeneration())
	g.cancel(&dialError{err})
}

// DialHook implements redis.Hook: it passes every dial through and reports
// one that nobody answered.
func (f *refusals) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && unanswered(err) {
			f.refused(err)
		}
		return conn, err
	}
}

// ProcessHook implements redis.Hook; it adds nothing.
func (f *refusals) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook; it adds nothing.
func (f *refusals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// watched is one call that watches for a refused dial.
type watched struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool
}

// watch returns the context for one call of the store, which a refused dial
// ends, and the watch to end with it.
func (f *refusals) watch(ctx context.Context) (context.Context, watched) {
	// A call that finds an idle connection in the pool dials nothing,
	// unless the connection turns out broken: it goes unwatched, which
	// saves the watch's allocations on the common path. When the server
	// is gone, its broken connections leave the pool, and the calls after
	// them are watched.
	if f == nil || f.client.PoolStats().IdleConns > 0 {
		return ctx, watched{}
	}
	g := f.gen.Load()
	wctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(g.ctx, func() { cancel(context.Cause(g.ctx)) })
	return wctx, watched{wctx, cancel, stop}
}

// end ends the watch of a call that failed when failed is true. It returns
// the refused dial that ended the call, if one did and its caller's context
// did not end first, or nil.
func (w watched) end(caller context.Context, failed bool) error {
	if w.ctx == nil {
		return nil
	}
	w.stop()
	var refused *dialError
	if !failed || caller.Err() != nil || !errors.As(context.Cause(w.ctx), &refused) {
		refused = nil
	}
	w.cancel(nil)
	if refused == nil {
		return nil // not a typed nil
	}
	return refused
}
