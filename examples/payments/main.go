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
//	go run ./examples/payments -paced -burst 10
//
// It prints progress every second and ends with one summary line:
//
//	sent=… ok=… 429=… limited=… cut=… errors=… wait_p50=… wait_p99=…
//
// limited counts the charges the throttle refused because the limit had no
// slot for them within -maxwait (in -mode wait, none in a healthy run); cut
// counts those the end of the run cut short: in flight, or refused at once
// because their slot lay beyond the end (up to one per worker).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

func main() { os.Exit(run()) }

func run() int {
	var load examplekit.Flags // -redis, -workers, -duration, -mode, -margin, -maxwait, -transit
	load.Register(flag.CommandLine)
	gateway := flag.String("gateway", "", "gateway base URL; requests are POST URL/v1/charges (empty: in-process strict gateway)")
	name := flag.String("name", "pg1", "the gateway's name: the rate key shared by every process")
	rate := flag.Int("rate", 100, "requests allowed per -per")
	per := flag.Duration("per", time.Second, "the limit's window")
	ignoreUpstream := flag.Bool("ignore-upstream", false, "do not listen to 429s, Retry-After and rate-limit headers")
	gatewayRate := flag.Int("gateway-rate", 0, "in-process gateway only: the limit it really enforces per -per (0: -rate)")
	algorithm := flag.String("algorithm", "log", "how to count: log (exact sliding log), fixed, counter or buckets")
	precision := flag.Duration("precision", 0, "-algorithm buckets: bucket length (0: -per/10)")
	paced := flag.Bool("paced", false, "pace the limit: one every -per/-rate, -burst more at once (a GCRA; -algorithm log)")
	burst := flag.Int("burst", 0, "-paced: requests beyond one that may go at once")
	flag.Parse()

	bad := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "payments: "+format+"\n", args...)
		return 2
	}
	precisionSet := false
	flag.Visit(func(f *flag.Flag) { precisionSet = precisionSet || f.Name == "precision" })
	if err := load.Check(*gateway == ""); err != nil {
		return bad("%v", err)
	}
	switch {
	case flag.NArg() > 0:
		return bad("unexpected arguments %q", flag.Args())
	case *name == "":
		return bad("-name must not be empty")
	case *rate < 1:
		return bad("-rate must be at least 1, not %d", *rate)
	case *per < time.Millisecond:
		return bad("-per must be at least 1ms, not %s", *per)
	case *gatewayRate < 0 || *gatewayRate > 0 && *gateway != "":
		return bad("-gateway-rate is a positive limit for the in-process gateway only")
	case *precision < 0:
		return bad("-precision must not be negative, not %s", *precision)
	case precisionSet && *algorithm != "buckets":
		return bad("-precision applies to -algorithm buckets only")
	case *burst != 0 && !*paced:
		return bad("-burst applies to -paced only")
	}
	alg, err := parseAlgorithm(*algorithm)
	if err != nil {
		return bad("-algorithm: %v", err)
	}
	limit := throttle.Per(*rate, *per)
	if *paced {
		limit = throttle.Paced(*rate, *per, *burst)
	}
	if alg == throttle.Buckets {
		limit.Precision = *precision
		if limit.Precision == 0 {
			limit.Precision = *per / 10
		}
	}

	// No -redis: an embedded Redis, so that the example runs on its own.
	rdb, err := examplekit.StartRedis(context.Background(), load.RedisAddrs()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		return 1
	}
	defer rdb.Close()

	base := *gateway
	if base == "" {
		n := *rate
		if *gatewayRate > 0 {
			n = *gatewayRate
		}
		// The fake gateway counts like the real one: a sliding window on
		// arrival, with the IETF rate-limit headers when it can.
		up, err := throttletest.NewUpstream(throttletest.Config{N: n, Window: *per, Transit: load.Transit,
			IETF: *per%time.Second == 0})
		if err != nil {
			fmt.Fprintln(os.Stderr, "payments:", err)
			return 1
		}
		srv := httptest.NewServer(up)
		defer srv.Close()
		base = srv.URL
		fmt.Fprintf(os.Stderr, "in-process strict gateway: %d per %s\n", n, *per)
	}
	gw, err := url.Parse(base)
	if err != nil || (gw.Scheme != "http" && gw.Scheme != "https") || gw.Host == "" {
		return bad("-gateway: %q is not an absolute http(s) URL", base)
	}
	chargeURL := strings.TrimSuffix(base, "/") + "/v1/charges"

	// The throttle: every request to the gateway's host counts against one
	// log named after the gateway, shared by every process using this Redis.
	rule := throttle.Rule{
		Name:      "payments",
		Host:      gw.Host,
		Limits:    []throttle.Limit{limit},
		Key:       throttle.Fixed(*name),
		Algorithm: alg,
		// A 429 pauses every process; RateLimit-Policy and the like
		// tighten the limit for all of them (unless -ignore-upstream).
		IgnoreUpstream: *ignoreUpstream,
	}
	load.Apply(&rule) // -mode, -maxwait, -margin
	st, err := store.NewRedis(rdb.Client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		return 1
	}
	// Under the throttle: enough idle connections for every worker, so
	// that no worker dials a new one for each request.
	conns := http.DefaultTransport.(*http.Transport).Clone()
	conns.MaxIdleConnsPerHost = load.Workers
	tally := examplekit.NewTally(os.Stderr)
	tr, err := throttle.New(conns, st,
		throttle.WithRule(rule),
		throttle.WithOnDecision(tally.OnDecision),
	)
	if err != nil {
		return bad("%v", err)
	}
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	fmt.Fprintf(os.Stderr, "payments: %s, key %q, %s, algorithm %s, %d workers, %s, mode %s, margin %s\n",
		rdb, *name, limit, alg, load.Workers, load.Duration, load.Mode, rule.Margin)

	// The run's context ends at -duration: it cancels requests in flight,
	// and a waiting request whose slot lies beyond it fails at once. Each
	// worker charges in a loop, like a queue consumer: when the throttle
	// refuses a charge, it reschedules it after RetryAfter.
	ctx, cancel := context.WithTimeout(context.Background(), load.Duration)
	defer cancel()
	tally.Drive(ctx, load.Workers, func(ctx context.Context, _, _ int) (*http.Response, error) {
		return charge(ctx, client, chargeURL)
	})

	c, fb := tally.Counts(), tr.Stats().Total().Upstream
	fmt.Fprintf(os.Stderr, "done: %d refused by the limit; %d cut by the end of the run (in flight, or their slot lay beyond it); "+
		"upstream: %d 429s, %d pauses, %d tightenings recorded\n",
		c.Limited, c.Cut, fb.TooManyRequests, fb.Pauses, fb.Tightenings)
	fmt.Println(c)
	return 0
}

// charge makes one call to the gateway. A 429 is a response, not an error.
func charge(ctx context.Context, client *http.Client, url string) (*http.Response, error) {
	body := strings.NewReader(`{"amount":1000,"currency":"EUR","source":"tok_visa"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return client.Do(req)
}

// parseAlgorithm returns the algorithm of a short name, as its String
// writes it.
func parseAlgorithm(name string) (throttle.Algorithm, error) {
	for _, a := range []throttle.Algorithm{throttle.SlidingLog, throttle.FixedWindow, throttle.SlidingCounter, throttle.Buckets} {
		if a.String() == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want log, fixed, counter or buckets)", name)
}
