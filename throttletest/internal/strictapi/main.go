// Command strictapi serves the strict fake upstream of package throttletest
// in a process of its own, so that a fleet test measures arrivals in an
// ordinary program rather than in its own race-instrumented test binary.
//
//	strictapi -n 200 -per 1s [-algorithm log|gcra|fixed] [-burst 10] [-key-query access_token] [-app-n 300] [-transit 5ms] [-ietf] [-xratelimit] [-no-retry-after]
//
// It listens on a free loopback port (throttletest.NewServer: an arrival is
// timed when it reached the socket), prints its base URL on the first line
// of standard output, answers every path as the upstream does except
// GET /_stats, which returns throttletest.Stats as JSON (with ?app, the app
// limit's, under the key "app"), and exits when its standard input is closed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/throttletest"
)

func main() {
	n := flag.Int("n", 100, "requests allowed per key per window")
	per := flag.Duration("per", time.Second, "the window")
	keyQuery := flag.String("key-query", "", "query parameter naming the key (empty: one key for all)")
	transit := flag.Duration("transit", 0, "max random delay before a request arrives")
	noRetryAfter := flag.Bool("no-retry-after", false, "leave Retry-After out of the 429s")
	ietf := flag.Bool("ietf", false, "send RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers)")
	xrl := flag.Bool("xratelimit", false, "send X-RateLimit-Limit, -Remaining and -Reset (epoch seconds)")
	algorithm := flag.String("algorithm", "log", "how to count: log (sliding window), gcra (token bucket of -burst + 1) or fixed")
	burst := flag.Int("burst", 0, "-algorithm gcra: arrivals beyond one that may come at once")
	appN := flag.Int("app-n", 0, "also at most this many per window over all keys together (the app's limit; 0: none)")
	flag.Parse()

	alg, err := examplekit.ParseAlgorithm(*algorithm)
	if err != nil {
		fmt.Fprintln(os.Stderr, "strictapi:", err)
		os.Exit(2)
	}
	cfg := throttletest.Config{N: *n, Window: *per, Algorithm: alg, Burst: *burst, Transit: *transit, NoRetryAfter: *noRetryAfter, IETF: *ietf, XRateLimit: *xrl}
	if q := *keyQuery; q != "" {
		cfg.Key = func(r *http.Request) string { return r.URL.Query().Get(q) }
	}
	if *appN > 0 {
		cfg.Also = []throttletest.Config{{N: *appN, Window: *per, Key: func(*http.Request) string { return "app" }}}
	}
	u, err := throttletest.NewUpstream(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "strictapi:", err)
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Has("app") && *appN > 0 {
			_ = json.NewEncoder(w).Encode(u.Also(0).Stats())
			return
		}
		_ = json.NewEncoder(w).Encode(u.Stats())
	})
	mux.Handle("/", u)
	// Arrivals are timed when they reached the socket, not when this
	// process, sharing the machine with the fleet it measures, got round
	// to them.
	srv := throttletest.NewServer(mux)
	fmt.Println(srv.URL)
	_, _ = io.Copy(io.Discard, os.Stdin) // then exit, the server with it
}
