package main

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/store"
)

const window = time.Second

func newLimiter(t *testing.T, st store.Store, n int, per, margin time.Duration) *throttle.Limiter {
	t.Helper()
	lim, err := throttle.NewLimiter(st, throttle.Rule{Name: "health-api", Limits: []throttle.Limit{throttle.Per(n, per)}, Margin: margin})
	require.NoError(t, err)
	return lim
}

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// fakeServer is an invoker that records when it was called, and answers
// with the errors it is given, in turn (nil once they run out).
type fakeServer struct {
	mu      sync.Mutex
	calls   []time.Time
	answers []error
}

func (f *fakeServer) invoke(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, time.Now())
	if len(f.answers) == 0 {
		return nil
	}
	err := f.answers[0]
	f.answers = f.answers[1:]
	return err
}

func exhausted(t *testing.T, retry time.Duration) error {
	t.Helper()
	st := status.New(codes.ResourceExhausted, "quota")
	if retry > 0 {
		var err error
		st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
		require.NoError(t, err)
	}
	return st.Err()
}

// defaultMargin is a throttle.Rule's Margin when it sets none.
const defaultMargin = 5 * time.Millisecond

// TestInterceptorWaits checks, on a fake clock, that calls with the same
// token share the limit and calls with another token do not.
func TestInterceptorWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := store.NewMemory()
		require.NoError(t, err)
		var srv fakeServer
		call := Interceptor(newLimiter(t, m, 2, window, 0), KeyByToken)
		start := time.Now()
		for _, token := range []string{"a", "a", "b", "a"} {
			require.NoError(t, call(withToken(context.Background(), token), "/svc/M", nil, nil, nil, srv.invoke))
		}
		require.Len(t, srv.calls, 4)
		assert.Equal(t, start, srv.calls[2], "another token, another log")
		assert.GreaterOrEqual(t, srv.calls[3].Sub(start), window+defaultMargin, "the 3rd call of a waits for a window")

		// A call refused at once: its slot lies beyond its deadline.
		ctx, cancel := context.WithTimeout(withToken(context.Background(), "a"), 10*time.Millisecond)
		defer cancel()
		err = call(ctx, "/svc/M", nil, nil, nil, srv.invoke)
		require.ErrorIs(t, err, throttle.ErrLimited)
		assert.Len(t, srv.calls, 4, "not sent")
	})
}

// TestInterceptorPauses checks, on a fake clock, that RESOURCE_EXHAUSTED
// pauses the key for every process on the store: for the RetryInfo's delay,
// or a window of the limit without one.
func TestInterceptorPauses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry time.Duration
		pause time.Duration
	}{
		{"with RetryInfo", 3 * time.Second, 3 * time.Second},
		{"without", 0, window + defaultMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, err := store.NewMemory()
				require.NoError(t, err)
				srv := fakeServer{answers: []error{exhausted(t, tc.retry)}}
				lim := newLimiter(t, m, 10, window, 0)
				ctx := withToken(context.Background(), "a")
				err = Interceptor(lim, KeyByToken)(ctx, "/svc/M", nil, nil, nil, srv.invoke)
				assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the caller gets the server's answer")
				assert.Equal(t, uint64(1), lim.Stats().Rules[0].Upstream.Pauses)

				// Another process on the same store waits for the pause.
				peer := Interceptor(newLimiter(t, m, 10, window, 0), KeyByToken)
				start := time.Now()
				require.NoError(t, peer(ctx, "/svc/M", nil, nil, nil, srv.invoke))
				require.NoError(t, peer(withToken(context.Background(), "b"), "/svc/M", nil, nil, nil, srv.invoke))
				require.Len(t, srv.calls, 3)
				assert.Equal(t, tc.pause, srv.calls[1].Sub(start))
				assert.Equal(t, srv.calls[1], srv.calls[2], "another token is not paused")
			})
		})
	}
}

// startServer starts the example's server, and a client of it through the
// interceptor, connected before the test's calls.
func startServer(t *testing.T, lim *throttle.Limiter, n int, per time.Duration) (healthpb.HealthClient, *strict) {
	t.Helper()
	srv, addr, s, err := serveStrict(n, per)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(Interceptor(lim, KeyByToken)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn.Connect()
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		require.True(t, conn.WaitForStateChange(ctx, st), "the client did not connect")
	}
	return healthpb.NewHealthClient(conn), s
}

// TestOverGRPC runs the interceptor against the example's strict server on
// loopback, through a Redis store (embedded): callers that keep to the
// limit get no RESOURCE_EXHAUSTED, and a server stricter than the limit
// pauses them until it lets them in again.
func TestOverGRPC(t *testing.T) {
	rdb, err := examplekit.StartRedis(context.Background())
	require.NoError(t, err)
	t.Cleanup(rdb.Close)
	st, err := store.NewRedis(rdb.Client)
	require.NoError(t, err)
	const per = 500 * time.Millisecond

	t.Run("within the limit", func(t *testing.T) {
		// A margin of 50ms covers the loopback's jitter.
		lim := newLimiter(t, st, 5, per, 50*time.Millisecond)
		client, s := startServer(t, lim, 5, per)
		ctx := withToken(context.Background(), "within")
		var wg sync.WaitGroup
		errs := make(chan error, 12)
		for range 3 {
			wg.Go(func() {
				for range 4 {
					_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		assert.Zero(t, s.refusals())
		assert.Equal(t, uint64(12), lim.Stats().Rules[0].Requests[throttle.Sent])
	})

	t.Run("a stricter server", func(t *testing.T) {
		lim := newLimiter(t, st, 10, per, 0)
		client, s := startServer(t, lim, 2, per)
		ctx := withToken(context.Background(), "stricter")
		var codesSeen []codes.Code
		for range 4 {
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			codesSeen = append(codesSeen, status.Code(err))
		}
		assert.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.OK}, codesSeen,
			"the 4th waits for the pause the 3rd's answer set")
		assert.Equal(t, 1, s.refusals())
		assert.Equal(t, uint64(1), lim.Stats().Rules[0].Upstream.Pauses)
	})
}
