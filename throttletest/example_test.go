package throttletest_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
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
		Host:     u.Host,
		Limits:   []throttle.Limit{throttle.PerHour(3)},
		FailFast: true,
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
