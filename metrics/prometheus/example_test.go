package throttleprom_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/throttle-go/throttle"
	throttleprom "github.com/throttle-go/throttle/metrics/prometheus"
	"github.com/throttle-go/throttle/store"
)

// A transport's metrics in the Prometheus text format, as a scrape of
// promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) returns them: two
// requests sent, a third refused.
func Example() {
	st, _ := store.NewMemory()
	tr, err := throttle.New(okUpstream, st, throttle.WithRule(throttle.Rule{
		Name: "payments", Host: "api.gateway.example",
		Limits: []throttle.Limit{throttle.PerMinute(2)}, FailFast: true,
	}))
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(throttleprom.NewCollector(tr))

	client := &http.Client{Transport: tr}
	for range 3 {
		resp, err := client.Get("https://api.gateway.example/v1/charges")
		if err != nil {
			fmt.Println("refused:", errors.Is(err, throttle.ErrLimited))
			continue
		}
		resp.Body.Close()
	}

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "throttle_requests_total", "throttle_wait_seconds":
			_, _ = expfmt.MetricFamilyToText(os.Stdout, f)
		}
	}
	// Output:
	// refused: true
	// # HELP throttle_requests_total Requests by what the transport did with them (one per attempt); outcome is sent, limited, canceled, failed, failed_open or unmatched; shadow is true for a shadow rule's would-be decisions.
	// # TYPE throttle_requests_total counter
	// throttle_requests_total{outcome="canceled",rule="payments",shadow="false"} 0
	// throttle_requests_total{outcome="failed",rule="payments",shadow="false"} 0
	// throttle_requests_total{outcome="failed_open",rule="payments",shadow="false"} 0
	// throttle_requests_total{outcome="limited",rule="payments",shadow="false"} 1
	// throttle_requests_total{outcome="sent",rule="payments",shadow="false"} 2
	// throttle_requests_total{outcome="unmatched",rule="",shadow="false"} 0
	// # HELP throttle_wait_seconds How long the requests sent waited for their slot (a shadow rule's: would have waited).
	// # TYPE throttle_wait_seconds histogram
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.001"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.002"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.004"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.008"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.016"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.032"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.064"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.128"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.256"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="0.512"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="1.024"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="2.048"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="4.096"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="8.192"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="16.384"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="32.768"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="65.536"} 2
	// throttle_wait_seconds_bucket{rule="payments",shadow="false",le="+Inf"} 2
	// throttle_wait_seconds_sum{rule="payments",shadow="false"} 0
	// throttle_wait_seconds_count{rule="payments",shadow="false"} 2
}

var okUpstream = roundTripperFunc(func(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
})
