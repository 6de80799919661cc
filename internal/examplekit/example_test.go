package examplekit_test

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
	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

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
	tally := examplekit.NewTally(nil) // no progress lines
	// NoMargin: a worker the machine runs late must not retake its slot
	// (under FailFast a retake behind the other worker's finds none), so
	// that the line below holds on a loaded machine too.
	tr, err := throttle.New(nil, st,
		throttle.WithRule(throttle.Rule{Host: u.Host, Limits: []throttle.Limit{throttle.PerHour(5)}, FailFast: true, Margin: throttle.NoMargin}),
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
