package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

func main() {
	addr := flag.String("redis", "", "Redis host:port (empty: an embedded Redis, for a try)")
	api := flag.String("url", "", "the URL to call (empty: a local fake API)")
	flag.Parse()
	if *addr == "" { // a fleet shares one real Redis instead
		mr, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer mr.Close()
		*addr = mr.Addr()
	}
	if *api == "" {
		fake := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		defer fake.Close()
		*api = fake.URL + "/v1/items"
	}
	u, err := url.Parse(*api)
	if err != nil {
		log.Fatal(err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	st, err := store.NewRedis(rdb) // does no I/O
	if err != nil {
		log.Fatal(err)
	}
	tr, err := throttle.New(nil, st, throttle.WithRule(throttle.Rule{
		Host:    u.Hostname(),
		Limits:  []throttle.Limit{throttle.PerSecond(10), throttle.PerHour(50_000)},
		MaxWait: 10 * time.Second,
	}))
	if err != nil {
		log.Fatal(err) // an invalid configuration fails here, never at request time
	}
	client := &http.Client{Transport: tr}

	start := time.Now()
	for range 20 {
		resp, err := client.Get(*api)
		var limited *throttle.LimitError
		switch {
		case errors.As(err, &limited):
			log.Fatalln("no slot within 10s; retry after", limited.RetryAfter)
		case err != nil:
			log.Fatal(throttle.RedactURLError(err))
		}
		resp.Body.Close()
	}
	fmt.Printf("20 requests at 10 per second in %.1fs\n", time.Since(start).Seconds())
}
