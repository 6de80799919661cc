// Command fleet is one process of the fleet TestFleetUsagePublished runs:
// workers that send through a Transport with the rule "fleet" (Fixed key
// "gw", one request at a time in flight per key with -inflight), count what
// the Transport decided with its decision hook, print it, and keep the
// process (and its published rules) alive until stdin closes.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

func main() {
	addr := flag.String("redis", "", "redis-server address")
	workers := flag.Int("workers", 4, "workers")
	requests := flag.Int("requests", 30, "requests per worker")
	limit := flag.Int("limit", 200, "requests per hour")
	hold := flag.Duration("hold", 0, "with -inflight, how long the upstream takes to answer")
	inflight := flag.Int("inflight", 0, "Rule.InFlight")
	flag.Parse()

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(*hold)
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	st, err := store.NewRedis(rdb)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	var sent, limited, other atomic.Int64
	rule := throttle.Rule{Name: "fleet", Host: strings.TrimPrefix(up.URL, "http://"), Key: throttle.Fixed("gw"),
		Limits: []throttle.Limit{throttle.PerHour(*limit)}, NoDefaultPace: true, FailFast: *inflight == 0}
	if *inflight > 0 {
		rule.InFlight, rule.MaxWait = *inflight, time.Minute
	}
	tr, err := throttle.New(nil, st, throttle.WithRule(rule), throttle.WithOnDecision(func(d throttle.Decision) {
		switch d.Outcome {
		case throttle.Sent:
			sent.Add(int64(d.Cost))
		case throttle.Limited:
			limited.Add(1)
		default:
			other.Add(1)
		}
	}))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for range *requests {
				resp, err := client.Get(up.URL + "/x")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}
		})
	}
	if *inflight > 0 {
		fmt.Println("running") // the test reads the leases and the queue now
	}
	wg.Wait()
	fmt.Printf("done sent=%d limited=%d other=%d\n", sent.Load(), limited.Load(), other.Load())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the test is done with the published rules
	_ = tr.Close()
}
