// Command payments shows throttle in the setting of a queue consumer calling
// a payment gateway that allows N calls per window to all of us together.
// Run several copies against one Redis and the gateway still sees at most N
// per window: the rate key is the gateway's name, shared through Redis.
//
// With no flags it runs on its own: an embedded Redis and an in-process
// strict gateway that answers 429 to any excess, enforcing -rate per -per.
//
//	go run ./examples/payments
//	go run ./examples/payments -redis 127.0.0.1:6379 -gateway https://pg.example.com -rate 100 -per 1s
//	go run ./examples/payments -algorithm counter
//
// It prints progress every second and ends with one summary line:
//
//	sent=… ok=… 429=… limited=… errors=… wait_p50=… wait_p99=…
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/exampleutil"
	"github.com/throttle-go/throttle/internal/upstream"
	"github.com/throttle-go/throttle/store"
)

func main() { os.Exit(run()) }

// errorPause is how long a worker rests after an error other than a
// refusal (gateway down, Redis unreachable), so that it never spins.
const errorPause = 200 * time.Millisecond

func run() int {
	redisAddrs := flag.String("redis", "", "Redis address, or several comma-separated for a Cluster (empty: embedded Redis)")
	gateway := flag.String("gateway", "", "gateway base URL; requests are POST URL/v1/charges (empty: in-process strict gateway)")
	name := flag.String("name", "pg1", "the gateway's name: the rate key shared by every process")
	rate := flag.Int("rate", 100, "requests allowed per -per")
	per := flag.Duration("per", time.Second, "the limit's window")
	workers := flag.Int("workers", 8, "concurrent workers in this process")
	duration := flag.Duration("duration", 10*time.Second, "how long to run")
	mode := flag.String("mode", "wait", "wait: wait for a free slot; fail: fail fast when none is free")
	margin := flag.Duration("margin", throttle.DefaultMargin, "safety margin added to the window (0: none)")
	transit := flag.Duration("transit", 0, "in-process gateway only: max random transit delay per request")
	maxWait := flag.Duration("maxwait", throttle.DefaultMaxWait, "wait mode: longest wait for a slot")
	ignoreUpstream := flag.Bool("ignore-upstream", false, "do not listen to 429s, Retry-After and rate-limit headers")
	gatewayRate := flag.Int("gateway-rate", 0, "in-process gateway only: the limit it really enforces per -per (0: -rate)")
	algorithm := flag.String("algorithm", "log", "how to count: log (exact sliding log), fixed, counter or buckets")
	precision := flag.Duration("precision", 0, "-algorithm buckets: bucket length (0: -per/10)")
	flag.Parse()

	bad := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "payments: "+format+"\n", args...)
		return 2
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case flag.NArg() > 0:
		return bad("unexpected arguments %q", flag.Args())
	case *name == "":
		return bad("-name must not be empty")
	case *rate < 1:
		return bad("-rate must be at least 1, not %d", *rate)
	case *per < time.Millisecond:
		return bad("-per must be at least 1ms, not %s", *per)
	case *workers < 1:
		return bad("-workers must be at least 1, not %d", *workers)
	case *duration <= 0:
		return bad("-duration must be positive, not %s", *duration)
	case *mode != "wait" && *mode != "fail":
		return bad("-mode must be wait or fail, not %q", *mode)
	case *margin < 0:
		return bad("-margin must not be negative, not %s", *margin)
	case *transit < 0:
		return bad("-transit must not be negative, not %s", *transit)
	case *transit > 0 && *gateway != "":
		return bad("-transit applies to the in-process gateway only; drop it or -gateway")
	case *gatewayRate < 0 || *gatewayRate > 0 && *gateway != "":
		return bad("-gateway-rate is a positive limit for the in-process gateway only")
	case *mode == "fail" && set["maxwait"]:
		return bad("-maxwait applies to -mode wait only")
	case *maxWait <= 0:
		return bad("-maxwait must be positive (use -mode fail to never wait), not %s", *maxWait)
	case *precision < 0:
		return bad("-precision must not be negative, not %s", *precision)
	case set["precision"] && *algorithm != "buckets":
		return bad("-precision applies to -algorithm buckets only")
	}
	alg, err := store.ParseAlgorithm(*algorithm)
	if err != nil {
		return bad("-algorithm: %v", err)
	}
	limit := throttle.Per(*rate, *per)
	if alg == throttle.Buckets {
		limit.Precision = *precision
		if limit.Precision == 0 {
			limit.Precision = *per / 10
		}
	}

	rdb, where, closeRedis, err := exampleutil.Redis(*redisAddrs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		return 1
	}
	defer closeRedis()
	if err := exampleutil.Ping(context.Background(), rdb); err != nil {
		fmt.Fprintf(os.Stderr, "payments: %s does not answer: %v\n", where, err)
		return 1
	}

	base := *gateway
	if base == "" {
		n := *rate
		if *gatewayRate > 0 {
			n = *gatewayRate
		}
		url, stop, err := exampleutil.Upstream(upstream.Config{N: n, Window: *per, Transit: *transit,
			IETF: *per%time.Second == 0})
		if err != nil {
			fmt.Fprintln(os.Stderr, "payments:", err)
			return 1
		}
		defer stop()
		base = url
		fmt.Fprintf(os.Stderr, "in-process strict gateway: %d per %s\n", n, *per)
	}
	gw, err := exampleutil.ParseURL(base)
	if err != nil {
		return bad("-gateway: %v", err)
	}
	chargeURL := strings.TrimSuffix(base, "/") + "/v1/charges"

	// The throttle: every request to the gateway's host counts against one
	// log named after the gateway, shared by every process using this Redis.
	rule := throttle.Rule{
		Name:      "payments",
		Host:      gw.Host,
		Limits:    []throttle.Limit{limit},
		Key:       throttle.Fixed(*name),
		Margin:    *margin,
		Algorithm: alg,
		// A 429 pauses every process; RateLimit-Policy and the like
		// tighten the limit for all of them (unless -ignore-upstream).
		IgnoreUpstream: *ignoreUpstream,
	}
	if *margin == 0 {
		rule.Margin = throttle.NoMargin // Margin 0 in a Rule means the default
	}
	if *mode == "fail" {
		rule.Mode = throttle.FailFast
	} else {
		rule.MaxWait = *maxWait
	}
	st, err := store.NewRedis(rdb)
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		return 1
	}
	stats := exampleutil.NewStats()
	tr, err := throttle.New(exampleutil.Base(*workers), st,
		throttle.WithRule(rule),
		throttle.WithOnDecision(stats.OnDecision),
	)
	if err != nil {
		return bad("%v", err)
	}
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	fmt.Fprintf(os.Stderr, "payments: %s, key %q, %s, algorithm %s, %d workers, %s, mode %s, margin %s\n",
		where, *name, limit, alg, *workers, *duration, *mode, rule.Margin)

	// The run's context ends at -duration: it cancels requests in flight,
	// and a waiting request whose slot lies beyond it fails at once.
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	progressCtx, stopProgress := context.WithCancel(context.Background())
	var progress sync.WaitGroup
	progress.Go(func() { stats.Progress(progressCtx, os.Stderr, time.Second) })

	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() { worker(ctx, client, chargeURL, stats) })
	}
	wg.Wait()
	stopProgress()
	progress.Wait()

	fb := tr.FeedbackStats()
	fmt.Fprintf(os.Stderr, "done: %d requests cut short by the end of the run; upstream: %d 429s, %d pauses, %d tightenings recorded\n",
		stats.Canceled(), fb.TooManyRequests, fb.Pauses, fb.Tightenings)
	fmt.Println(stats.Summary())
	return 0
}

// worker charges until the run ends, like a queue consumer: when the
// throttle refuses a charge, it reschedules it after RetryAfter.
func worker(ctx context.Context, client *http.Client, url string, stats *exampleutil.Stats) {
	for ctx.Err() == nil {
		err := charge(ctx, client, url, stats)
		var limited *throttle.LimitError
		switch {
		case err == nil:
		case errors.As(err, &limited):
			stats.Limited()
			exampleutil.Sleep(ctx, limited.RetryAfter)
		default:
			stats.Failed(ctx, err)
			exampleutil.Sleep(ctx, errorPause)
		}
	}
}

// charge makes one call to the gateway. A 429 is a response, not an error.
func charge(ctx context.Context, client *http.Client, url string, stats *exampleutil.Stats) error {
	body := strings.NewReader(`{"amount":1000,"currency":"EUR","source":"tok_visa"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer exampleutil.Drain(resp)
	stats.Status(resp.StatusCode)
	return nil
}
