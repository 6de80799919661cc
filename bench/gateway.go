package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/RussellLuo/slidingwindow"
	"github.com/go-chi/httprate"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulstdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/throttle-go/throttle/throttletest"
)

// The matrix's upstream: a gateway process (this binary re-executed with
// -gateway) that limits every request with one real server-side limiter of
// the Go ecosystem, used as its users use it: its own HTTP middleware and
// headers where it has one, else "if !Allow() { 429 }". Each is configured
// "100 per second" on one key.

const (
	gatewayN   = 100
	gatewayPer = time.Second
)

// gatewayKind is one upstream of the matrix.
type gatewayKind struct {
	id    string
	name  string
	about string
	// burst is the burst a paced limit must keep to match it (a bucket of
	// capacity b: b-1); log is set where the matching algorithm is the
	// sliding log instead, and shaped where it is the window limit with a
	// pace beside it (the default shape: the window bounds a window's count,
	// the pace its spread).
	burst  int
	log    bool
	shaped bool
	// window is set for the upstreams that count in windows (fixed,
	// sliding counter, log): from cold, they accept a window's N at once.
	window bool
	// strict is set for an upstream of strict spacing (burst 0 or 1): the
	// default configuration may meet a few 429s there in its first two
	// seconds.
	strict bool
	// handler returns the limiting handler in front of ok.
	handler func(ok http.Handler) (http.Handler, error)
}

// tooMany is what a hand-written limiter answers when it refuses.
func tooMany(w http.ResponseWriter) {
	http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
}

func xrate(burst int) func(http.Handler) (http.Handler, error) {
	return func(ok http.Handler) (http.Handler, error) {
		l := rate.NewLimiter(rate.Limit(gatewayN), burst)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !l.Allow() {
				tooMany(w)
				return
			}
			ok.ServeHTTP(w, r)
		}), nil
	}
}

func gcra(burst int) func(http.Handler) (http.Handler, error) {
	return func(ok http.Handler) (http.Handler, error) {
		st, err := memstore.NewCtx(1024)
		if err != nil {
			return nil, err
		}
		l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(gatewayN), MaxBurst: burst})
		if err != nil {
			return nil, err
		}
		h := &throttled.HTTPRateLimiterCtx{RateLimiter: l}
		return h.RateLimit(ok), nil
	}
}

var gatewayKinds = []gatewayKind{
	{id: "rate-burst1", name: "x/time/rate, burst 1", burst: 0, strict: true,
		about:   "`golang.org/x/time/rate` `NewLimiter(100, 1)`: a token bucket of 1, strict 10 ms spacing; `if !l.Allow() { 429 }` (no headers: the package has no HTTP middleware)",
		handler: xrate(1)},
	{id: "rate-burst100", name: "x/time/rate, burst 100", burst: 99,
		about:   "`NewLimiter(100, 100)`: a token bucket of 100 (a full second's burst); `if !l.Allow() { 429 }`",
		handler: xrate(gatewayN)},
	{id: "gcra-burst0", name: "throttled GCRA, burst 0", burst: 0, strict: true,
		about:   "`github.com/throttled/throttled/v2` `NewGCRARateLimiterCtx(memstore, RateQuota{PerSec(100), MaxBurst: 0})` behind its `HTTPRateLimiterCtx`: strict spacing; its headers `X-RateLimit-Limit: 1` (MaxBurst + 1), `-Remaining`, `-Reset` (seconds from now) and `Retry-After` (whole seconds, rounded up: 1)",
		handler: gcra(0)},
	{id: "gcra-burst99", name: "throttled GCRA, burst 99", burst: 99,
		about:   "the same with `MaxBurst: 99`: a bucket of 100; `X-RateLimit-Limit: 100`",
		handler: gcra(gatewayN - 1)},
	{id: "fixed", name: "ulule fixed window", log: true, window: true,
		about: "`github.com/ulule/limiter/v3` `Rate{Period: 1s, Limit: 100}` with its memory store behind its `stdlib` middleware: a fixed window that starts at the first request after the last one expired; headers `X-RateLimit-Limit: 100`, `-Remaining`, `-Reset` (epoch seconds), no `Retry-After`",
		handler: func(ok http.Handler) (http.Handler, error) {
			l := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: gatewayPer, Limit: gatewayN})
			return ulstdlib.NewMiddleware(l, ulstdlib.WithKeyGetter(func(*http.Request) string { return "gateway" })).Handler(ok), nil
		}},
	{id: "counter", name: "sliding-window counter", shaped: true, window: true,
		about: "`github.com/RussellLuo/slidingwindow` `NewLimiter(1s, 100, NewLocalWindow)`: the previous aligned window's count weighted by the share of it still in the sliding window, plus the current one; `if !l.Allow() { 429 }` (no headers). (`mennanov/limiters`, another implementation, is not served by the module proxy this suite can reach; this is the same algorithm)",
		handler: func(ok http.Handler) (http.Handler, error) {
			l, _ := slidingwindow.NewLimiter(gatewayPer, gatewayN, func() (slidingwindow.Window, slidingwindow.StopFunc) {
				return slidingwindow.NewLocalWindow()
			})
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !l.Allow() {
					tooMany(w)
					return
				}
				ok.ServeHTTP(w, r)
			}), nil
		}},
	{id: "httprate", name: "go-chi/httprate", shaped: true, window: true,
		about: "`github.com/go-chi/httprate` `LimitBy(100, time.Second, Key(\"*\"))` in front of the handler: a sliding-window counter (the previous aligned window's count weighted in, plus the current one) that refuses when that estimate, rounded, plus the request exceeds 100, so a steady rate of 99.5 per second or more is refused; headers `X-RateLimit-Limit: 100`, `-Remaining`, `-Reset` (epoch seconds: the aligned window's end) and `Retry-After: 1` (the window) on a 429",
		handler: func(ok http.Handler) (http.Handler, error) {
			return httprate.LimitBy(gatewayN, gatewayPer, httprate.Key("*"))(ok), nil
		}},
	{id: "log", name: "exact sliding log", log: true, window: true,
		about: "`throttletest.Upstream` (this repository's strict fake): at most 100 accepted arrivals in any 1 s, `Retry-After` on a 429 and `X-RateLimit-Limit/-Remaining/-Reset` (epoch seconds), as GitHub sends them",
		handler: func(http.Handler) (http.Handler, error) {
			return throttletest.NewUpstream(throttletest.Config{N: gatewayN, Window: gatewayPer, XRateLimit: true})
		}},
}

func gatewayByID(id string) (gatewayKind, bool) {
	for _, g := range gatewayKinds {
		if g.id == id {
			return g, true
		}
	}
	return gatewayKind{}, false
}

// arrivals is what a gateway saw: when each request arrived (read before the
// limiter decided), in Unix nanoseconds, by the answer it got.
type arrivals struct {
	Accepted []int64
	Rejected []int64
}

// recorder wraps a limiting handler and records each arrival by its answer.
type recorder struct {
	mu  sync.Mutex
	got arrivals
	h   http.Handler
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now().UnixNano()
	sw := &statusWriter{ResponseWriter: w}
	rec.h.ServeHTTP(sw, r)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if sw.status == http.StatusTooManyRequests {
		rec.got.Rejected = append(rec.got.Rejected, at)
	} else {
		rec.got.Accepted = append(rec.got.Accepted, at)
	}
}

// runGateway is the body of a gateway process: it prints its base URL on
// the first line of standard output, answers GET /_stats with its arrivals,
// and exits when its standard input is closed.
func runGateway(id string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
	g, ok := gatewayByID(id)
	if !ok {
		fail(fmt.Errorf("unknown upstream %q", id))
	}
	h, err := g.handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
	}))
	if err != nil {
		fail(err)
	}
	rec := &recorder{h: h}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_stats", func(w http.ResponseWriter, _ *http.Request) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		_ = json.NewEncoder(w).Encode(rec.got)
	})
	mux.Handle("/", rec)
	fmt.Printf("http://%s\n", l.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	fail(http.Serve(l, mux))
}
