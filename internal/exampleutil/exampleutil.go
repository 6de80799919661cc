// Package exampleutil is the scaffolding shared by the runnable examples:
// connecting to Redis (or starting an embedded one), serving an in-process
// strict upstream, and counting what happened. The throttle configuration
// itself stays in each example's main.go.
package exampleutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/upstream"
)

// Redis connects to addrs, a comma-separated list: one address gives a
// *redis.Client, several a *redis.ClusterClient, and an empty list starts an
// embedded Redis (miniredis) on loopback. It returns the client, a
// description for the log and a function that closes everything.
func Redis(addrs string) (redis.UniversalClient, string, func(), error) {
	var list []string
	for a := range strings.SplitSeq(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	switch len(list) {
	case 0:
		m, err := miniredis.Run()
		if err != nil {
			return nil, "", nil, fmt.Errorf("starting the embedded Redis: %w", err)
		}
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		return c, "embedded Redis at " + m.Addr(), func() { _ = c.Close(); m.Close() }, nil
	case 1:
		c := redis.NewClient(&redis.Options{Addr: list[0]})
		return c, "Redis at " + list[0], func() { _ = c.Close() }, nil
	default:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: list})
		return c, "Redis Cluster at " + strings.Join(list, ","), func() { _ = c.Close() }, nil
	}
}

// Ping checks that Redis answers within a few seconds, so that a wrong
// address fails at setup with a clear message rather than as errors later.
func Ping(ctx context.Context, c redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// Upstream serves an in-process strict upstream (see internal/upstream) on a
// loopback httptest server, and returns its URL and a function that stops it.
func Upstream(cfg upstream.Config) (string, func(), error) {
	u, err := upstream.New(cfg)
	if err != nil {
		return "", nil, err
	}
	srv := httptest.NewServer(u)
	return srv.URL, srv.Close, nil
}

// ParseURL checks that s is an absolute http or https URL.
func ParseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an absolute http(s) URL", s)
	}
	return u, nil
}

// Sleep waits for d or until ctx ends, whichever comes first: a worker told
// to retry after d sleeps min(d, time left in the run), and never spins.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Base returns the transport under the throttle: http.DefaultTransport's
// settings, with enough idle connections per host for every worker, so that
// workers do not dial a new connection for every request.
func Base(workers int) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = workers
	return t
}

// Drain reads and closes a response body so that its connection is reused.
func Drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
}

// Stats counts what the workers of an example saw. It is safe for concurrent
// use.
type Stats struct {
	mu       sync.Mutex
	start    time.Time
	sent     int // handed to the network by the throttle
	ok       int // 2xx
	tooMany  int // 429
	limited  int // refused by the throttle: ErrLimited
	errors   int // other errors and unexpected statuses
	canceled int // ended by the end of the run
	waits    []time.Duration
	firstErr error
}

// NewStats returns empty Stats whose clock starts now.
func NewStats() *Stats { return &Stats{start: time.Now()} }

// OnDecision is the throttle.WithOnDecision hook: it counts the requests
// handed to the network and the delay the throttle gave them.
func (s *Stats) OnDecision(d throttle.Decision) {
	if d.Outcome != throttle.Sent {
		return
	}
	s.mu.Lock()
	s.sent++
	s.waits = append(s.waits, d.Delay)
	s.mu.Unlock()
}

// Status counts a response.
func (s *Stats) Status(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case code == http.StatusTooManyRequests:
		s.tooMany++
	case code >= 200 && code < 300:
		s.ok++
	default:
		s.errors++
		if s.firstErr == nil {
			s.firstErr = fmt.Errorf("unexpected status %d", code)
			fmt.Fprintln(os.Stderr, "first error:", s.firstErr)
		}
	}
}

// Limited counts a refusal by the throttle.
func (s *Stats) Limited() {
	s.mu.Lock()
	s.limited++
	s.mu.Unlock()
}

// Failed counts an error other than a refusal: as canceled if runCtx has
// ended (the run is over, so the request was cut short), else as an error.
// It prints the first error, which never holds a token: the throttle's
// errors hold hashed keys only, and the examples' URLs are not printed.
func (s *Stats) Failed(runCtx context.Context, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if runCtx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		s.canceled++
		return
	}
	s.errors++
	if s.firstErr == nil {
		s.firstErr = err
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may hold a token
		}
		fmt.Fprintln(os.Stderr, "first error:", err)
	}
}

// Progress prints a progress line to w every interval until ctx ends.
func (s *Stats) Progress(ctx context.Context, w io.Writer, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			fmt.Fprintf(w, "[%4.1fs] sent=%d ok=%d 429=%d limited=%d errors=%d\n",
				time.Since(s.start).Seconds(), s.sent, s.ok, s.tooMany, s.limited, s.errors)
			s.mu.Unlock()
		}
	}
}

// Canceled returns the number of requests cut short by the end of the run.
func (s *Stats) Canceled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.canceled
}

// Summary returns the one summary line:
// sent=… ok=… 429=… limited=… errors=… wait_p50=… wait_p99=…
func (s *Stats) Summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := slices.Clone(s.waits)
	slices.Sort(w)
	return fmt.Sprintf("sent=%d ok=%d 429=%d limited=%d errors=%d wait_p50=%s wait_p99=%s",
		s.sent, s.ok, s.tooMany, s.limited, s.errors,
		percentile(w, 50), percentile(w, 99))
}

// percentile returns the p-th percentile of sorted, by nearest rank, rounded
// to 10µs; 0s when empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted) + 99) / 100 // ceil(p/100 * n), 1-based
	return sorted[max(i, 1)-1].Round(10 * time.Microsecond)
}
