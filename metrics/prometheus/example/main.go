// Command example runs a small fleet of payment workers through a throttle
// Transport, against an in-process gateway that answers 429 to any excess, and
// serves the transport's metrics for Prometheus on -metrics while it runs:
//
//	go run ./example -metrics :9090 -duration 30s
//	curl -s localhost:9090/metrics | grep ^throttle_
//
// With -lanes, one worker's requests go first (a second lane); with
// -tenants N, the gateway's quota is shared between N merchants, one of
// them sending half the requests.
//
// It lives in the metrics/prometheus module so that the core module never
// imports Prometheus. With no -redis it starts an embedded Redis.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/examplekit"
	throttleprom "github.com/throttle-go/throttle/metrics/prometheus"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

func main() { os.Exit(run()) }

func run() int {
	metrics := flag.String("metrics", ":9090", "address to serve /metrics on")
	redisAddr := flag.String("redis", "", "Redis address or URL (empty: embedded Redis)")
	rate := flag.Int("rate", 50, "requests allowed per second")
	workers := flag.Int("workers", 4, "concurrent workers")
	duration := flag.Duration("duration", 30*time.Second, "how long to run")
	shadow := flag.Int("shadow", 0, "if positive, also try this many per second as a shadow rule: it records what it would do, and enforces nothing")
	lanes := flag.Bool("lanes", false, "give the rule two lanes: the first worker sends a request of the higher lane every 200ms, the others backfill")
	tenants := flag.Int("tenants", 0, "if positive, share the quota between this many merchants (the X-Merchant header), one of them sending half the requests")
	flag.Parse()
	if *rate < 1 || *workers < 1 || *duration <= 0 || *shadow < 0 || *tenants < 0 {
		fmt.Fprintln(os.Stderr, "example: -rate, -workers and -duration must be positive, -shadow and -tenants not negative")
		return 2
	}

	var addrs []string
	if *redisAddr != "" {
		addrs = strings.Split(*redisAddr, ",")
	}
	rdb, err := examplekit.StartRedis(context.Background(), addrs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		return 1
	}
	defer rdb.Close()
	st, err := store.NewRedis(rdb.Client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		return 1
	}

	up, err := throttletest.NewUpstream(throttletest.Config{N: *rate, Window: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		return 1
	}
	gateway := httptest.NewServer(up)
	defer gateway.Close()

	// A connection per worker kept idle, so that no request waits for a dial.
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = *workers
	host := strings.TrimPrefix(gateway.URL, "http://")
	rule := throttle.Rule{
		Name:   "payments",
		Host:   host,
		Limits: []throttle.Limit{throttle.PerSecond(*rate)},
		Key:    throttle.Fixed("gateway-1"),
	}
	if *lanes {
		rule.Lanes = 2
		rule.Lane = func(r *http.Request) int {
			if r.Header.Get("X-Priority") == "interactive" {
				return 1
			}
			return 0
		}
	}
	if *tenants > 0 {
		rule.Tenant = func(r *http.Request) (string, error) { return r.Header.Get("X-Merchant"), nil }
	}
	opts := []throttle.Option{throttle.WithRule(rule)}
	if *shadow > 0 { // what a lower limit would do, before turning it on
		opts = append(opts, throttle.WithRule(throttle.Rule{
			Name:   fmt.Sprintf("payments-%d", *shadow),
			Host:   host,
			Limits: []throttle.Limit{throttle.PerSecond(*shadow)},
			Key:    throttle.Fixed("gateway-1"),
			Shadow: true,
		}))
	}
	tr, err := throttle.New(base, st, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		return 2
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(throttleprom.NewCollector(tr))
	ln, err := net.Listen("tcp", *metrics)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		return 1
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Fprintf(os.Stderr, "example: %s, %d workers, %d/s for %s; metrics on http://%s/metrics\n", rdb, *workers, *rate, *duration, ln.Addr())

	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var sent atomic.Uint64
	for w := range *workers {
		interactive := *lanes && w == 0
		wg.Go(func() {
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, gateway.URL+"/v1/charges", nil)
				if err != nil {
					return
				}
				if interactive {
					req.Header.Set("X-Priority", "interactive")
				}
				if *tenants > 0 {
					merchant := "merchant-bulk"
					if sent.Add(1)%2 == 0 {
						merchant = fmt.Sprintf("merchant-%d", rand.IntN(*tenants))
					}
					req.Header.Set("X-Merchant", merchant)
				}
				resp, err := client.Do(req)
				var limited *throttle.LimitError
				switch {
				case err == nil:
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				case ctx.Err() != nil:
				case errors.As(err, &limited) && limited.BeyondDeadline:
					return // its slot lies past the end of the run
				case errors.As(err, &limited):
					select { // as a queue would: retry after RetryAfter
					case <-time.After(limited.RetryAfter):
					case <-ctx.Done():
					}
				default:
					fmt.Fprintln(os.Stderr, "example:", err)
					time.Sleep(100 * time.Millisecond)
				}
				if interactive {
					select {
					case <-time.After(200 * time.Millisecond):
					case <-ctx.Done():
					}
				}
			}
		})
	}
	wg.Wait()
	s := tr.Stats().Total()
	fmt.Printf("sent=%d limited=%d 429=%d\n", s.Requests[throttle.Sent], s.Requests[throttle.Limited], s.Upstream.TooManyRequests)
	return 0
}
