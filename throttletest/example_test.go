package throttletest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

// A test proves that a client keeps a third party's limit of 3 calls an
// hour: the throttle refuses the excess, and the fake upstream meets no 429.
func ExampleUpstream() {
	up, err := throttletest.NewUpstream(throttletest.Config{N: 3, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(up)
	defer srv.Close()

	st, err := store.NewMemory()
	if err != nil {
		panic(err)
	}
	u, _ := url.Parse(srv.URL)
	tr, err := throttle.New(nil, st, throttle.WithRule(throttle.Rule{
		Host:   u.Host,
		Limits: []throttle.Limit{throttle.PerHour(3)},
		Mode:   throttle.FailFast,
	}))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	for range 5 {
		resp, err := client.Get(srv.URL)
		if errors.Is(err, throttle.ErrLimited) {
			fmt.Println("limited by the throttle")
			continue
		}
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	stats := up.Stats()
	fmt.Printf("upstream: %d accepted, %d rejected\n", stats.Total.Accepted, stats.Total.Rejected)
	// Output:
	// 200 OK
	// 200 OK
	// 200 OK
	// limited by the throttle
	// limited by the throttle
	// upstream: 3 accepted, 0 rejected
}

// Without a throttle, the fake upstream answers 429 to the excess, with
// Retry-After.
func ExampleUpstream_tooMany() {
	up, err := throttletest.NewUpstream(throttletest.Config{N: 1, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(up)
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()
	for range 2 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			fmt.Println(resp.Status, "Retry-After:", resp.Header.Get("Retry-After"))
			continue
		}
		fmt.Println(resp.Status)
	}
	// Output:
	// 200 OK
	// 429 Too Many Requests Retry-After: 60
}

// A load test drives workers through a client until its context ends, and
// counts what they saw; Counts prints the summary line.
func ExampleTally() {
	up, err := throttletest.NewUpstream(throttletest.Config{N: 5, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(up)
	defer srv.Close()
	st, err := store.NewMemory()
	if err != nil {
		panic(err)
	}
	u, _ := url.Parse(srv.URL)
	tally := throttletest.NewTally(nil) // no progress lines
	tr, err := throttle.New(nil, st,
		throttle.WithRule(throttle.Rule{Host: u.Host, Limits: []throttle.Limit{throttle.PerHour(5)}, Mode: throttle.FailFast}),
		throttle.WithOnDecision(tally.OnDecision))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	// A refused worker sleeps for the RetryAfter, most of an hour: the load
	// ends when both workers have been refused.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var refused atomic.Int32
	tally.Drive(ctx, 2, func(ctx context.Context, worker, call int) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if errors.Is(err, throttle.ErrLimited) && refused.Add(1) == 2 {
			cancel()
		}
		return resp, err
	})
	fmt.Println(tally.Counts())
	// Output:
	// sent=5 ok=5 429=0 limited=2 cut=0 errors=0 wait_p50=0s wait_p99=0s
}
