// Command grpc shows throttle without HTTP: a gRPC client whose unary calls
// wait for a slot of a throttle.Limiter, shared through Redis by every
// process that calls the same service with the same token, and which tells
// the Limiter when the server answers RESOURCE_EXHAUSTED, so that the whole
// fleet pauses.
//
// With no flags it runs on its own: an embedded Redis, and an in-process
// gRPC server on loopback (the standard health service) that allows
// -server-rate calls per -per and refuses any excess with
// RESOURCE_EXHAUSTED and a RetryInfo.
//
//	go run .
//	go run . -redis 127.0.0.1:6379 -rate 50 -per 1s -workers 16
//	go run . -server-rate 10   # a server stricter than we were told: it pauses us
//
// It ends with one summary line:
//
//	calls=… ok=… resource_exhausted=… limited=… pauses=…
//
// limited counts the calls the Limiter refused because their slot lay
// beyond the end of the run (at most one per worker); a worker refused comes
// back after the error's RetryAfter.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

func main() { os.Exit(run()) }

func run() int {
	redisAddr := flag.String("redis", "", "Redis address or URL (empty: embedded Redis)")
	rate := flag.Int("rate", 20, "calls allowed per -per, to every process with the same token")
	per := flag.Duration("per", time.Second, "the limit's window")
	serverRate := flag.Int("server-rate", 0, "the calls the in-process server really allows per -per (0: -rate)")
	workers := flag.Int("workers", 8, "concurrent callers in this process")
	duration := flag.Duration("duration", 3*time.Second, "how long to run")
	flag.Parse()
	bad := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "grpc: "+format+"\n", args...)
		return 2
	}
	switch {
	case flag.NArg() > 0:
		return bad("unexpected arguments %q", flag.Args())
	case *rate < 1 || *serverRate < 0:
		return bad("-rate must be at least 1 and -server-rate positive or 0")
	case *per < time.Millisecond || *duration <= 0 || *workers < 1:
		return bad("-per must be at least 1ms, -duration positive, -workers at least 1")
	}
	if *serverRate == 0 {
		*serverRate = *rate
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "grpc:", err)
		return 1
	}

	var addrs []string
	if *redisAddr != "" {
		addrs = []string{*redisAddr}
	}
	rdb, err := examplekit.StartRedis(context.Background(), addrs...)
	if err != nil {
		return fail(err)
	}
	defer rdb.Close()
	st, err := store.NewRedis(rdb.Client)
	if err != nil {
		return fail(err)
	}

	srv, addr, s, err := serveStrict(*serverRate, *per)
	if err != nil {
		return fail(err)
	}
	defer srv.Stop()

	// The limiter: every call with the same token counts against one log,
	// shared by every process using this Redis.
	lim, err := throttle.NewLimiter(st, throttle.Rule{
		Name:   "health-api",
		Limits: []throttle.Limit{throttle.Per(*rate, *per)},
	})
	if err != nil {
		return fail(err)
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(Interceptor(lim, KeyByToken)))
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	fmt.Fprintf(os.Stderr, "grpc: %s, %d per %s (the server allows %d), %d workers, %s\n",
		rdb, *rate, *per, *serverRate, *workers, *duration)

	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	// The token travels in the metadata; the limiter only ever sees its hash.
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer demo-token")
	var c counts
	client := healthpb.NewHealthClient(conn)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
				c.add(ctx, err)
				// Refused by the limiter: like a queue consumer, come
				// back when a slot may be free (or at the end).
				var le *throttle.LimitError
				if errors.As(err, &le) {
					sleep(ctx, le.RetryAfter)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("%s pauses=%d server_refused=%d\n", &c, lim.Stats().Rules[0].Upstream.Pauses, s.refusals())
	return 0
}

// Interceptor limits every unary call with lim, under the key that key
// derives from the call, at a cost of 1: it waits for the call's slot
// (within the Limiter's MaxWait and the call's deadline), and when the
// server answers RESOURCE_EXHAUSTED it pauses the key, for the whole fleet,
// for the delay of the answer's RetryInfo (or, without one, for a window of
// the limit). A call the Limiter refuses fails with its error: a
// *throttle.LimitError (errors.Is throttle.ErrLimited) carrying RetryAfter.
func Interceptor(lim *throttle.Limiter, key func(ctx context.Context, method string) (string, error)) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		k, err := key(ctx, method)
		if err != nil {
			return err
		}
		if err := lim.Wait(ctx, k, 1); err != nil {
			return err
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) == codes.ResourceExhausted {
			// The call's error is what the caller needs; a pause that
			// could not be recorded is the store's concern (logged with
			// throttle.WithLogger).
			_ = lim.Pause(ctx, k, retryDelay(err))
		}
		return err
	}
}

// KeyByToken keys a call by the bearer token of its outgoing metadata,
// hashed as throttle.ByAuthorization hashes an HTTP request's (so an HTTP
// Transport's rule of the same name and limits shares the log), or by its
// method when it carries no token.
func KeyByToken(ctx context.Context, method string) (string, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	for _, v := range md.Get("authorization") {
		scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return operator.CredentialKey("bearer", cred)
		}
	}
	return "method:" + method, nil
}

// retryDelay is the delay of err's RetryInfo, zero if it has none.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// serveStrict starts a gRPC server on loopback that serves the health
// service and lets through at most n calls in any window per, refusing the
// excess with RESOURCE_EXHAUSTED and a RetryInfo. It returns the server, its
// address and its limit.
func serveStrict(n int, per time.Duration) (*grpc.Server, string, *strict, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	s := &strict{n: n, per: per}
	srv := grpc.NewServer(grpc.UnaryInterceptor(s.intercept))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }() // returns when Stop closes l
	return srv, l.Addr().String(), s, nil
}

// strict is the server's own limit: a sliding window on arrival, as an API
// enforces it.
type strict struct {
	n   int
	per time.Duration

	mu      sync.Mutex
	arrived []time.Time // within the last window, oldest first
	refused int
}

// refusals returns the number of calls refused.
func (s *strict) refusals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

func (s *strict) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	now := time.Now()
	s.mu.Lock()
	for len(s.arrived) > 0 && now.Sub(s.arrived[0]) >= s.per {
		s.arrived = s.arrived[1:]
	}
	if len(s.arrived) >= s.n {
		wait := s.arrived[0].Add(s.per).Sub(now)
		s.refused++
		s.mu.Unlock()
		st, err := status.New(codes.ResourceExhausted, "rate limit exceeded").
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	s.arrived = append(s.arrived, now)
	s.mu.Unlock()
	return handler(ctx, req)
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// counts are the outcomes of the calls.
type counts struct {
	calls, ok, exhausted, limited, other atomic.Int64
}

// add counts the outcome of one call that ended with err, made under ctx.
func (c *counts) add(ctx context.Context, err error) {
	switch {
	case err == nil:
		c.ok.Add(1)
	case status.Code(err) == codes.ResourceExhausted:
		c.exhausted.Add(1)
	case errors.Is(err, throttle.ErrLimited):
		c.limited.Add(1)
	case ctx.Err() != nil:
		return // cut by the end of the run
	default:
		c.other.Add(1)
	}
	c.calls.Add(1)
}

func (c *counts) String() string {
	s := fmt.Sprintf("calls=%d ok=%d resource_exhausted=%d limited=%d", c.calls.Load(), c.ok.Load(), c.exhausted.Load(), c.limited.Load())
	if n := c.other.Load(); n > 0 {
		s += fmt.Sprintf(" errors=%d", n)
	}
	return s
}
