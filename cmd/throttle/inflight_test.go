package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

// TestUsageInFlight: for a published rule with InFlight, usage and watch
// show the leases held against the cap and the requests in the queue,
// read from a real redis-server.
func TestUsageInFlight(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	prefix := fmt.Sprintf("inflight%d:", time.Now().UnixNano())
	st, client, err := store.NewRedisURL(url, store.WithPrefix(prefix))
	require.NoError(t, err)
	defer client.Close()
	base := roundTripper(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("body")), Request: r}, nil
	})
	tr, err := throttle.New(base, st, throttle.WithRule(throttle.Rule{Name: "pg", Host: "pg.example", Key: throttle.Fixed("pg1"),
		Limits: []throttle.Limit{throttle.PerSecond(100)}, InFlight: 2}))
	require.NoError(t, err)
	defer tr.Close()
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", "https://pg.example/charge", nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		return resp
	}
	a, b := get(), get()
	defer b.Body.Close()
	published(t, url, prefix, 1)
	third := make(chan *http.Response, 1)
	go func() { third <- get() }()
	usage := func() string {
		code, out, errOut := runCLI("usage", "-redis", url, "-prefix", prefix, "-rule", "pg", "-key", "pg1")
		require.Equal(t, exitOK, code, errOut)
		return out
	}
	var out string
	require.Eventually(t, func() bool {
		out = usage()
		return strings.Contains(out, "1 waiting in the queue")
	}, 5*time.Second, 20*time.Millisecond, "the third request queues")
	assert.Contains(t, out, "in flight: 2/2 leases held, the earliest until ")
	_, out, _ = runCLI("watch", "-redis", url, "-prefix", prefix, "-rule", "pg", "-key", "pg1", "-for", "1ms")
	assert.Contains(t, out, "in flight 2/2 queue 1")
	_, out, _ = runCLI("rules", "-redis", url, "-prefix", prefix)
	assert.Contains(t, out, "in-flight 2")

	require.NoError(t, a.Body.Close())
	c := <-third
	require.NoError(t, c.Body.Close())
	assert.Contains(t, usage(), "in flight: 1/2 leases held")
}
