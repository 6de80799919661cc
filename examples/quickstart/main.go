package main

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	st, err := store.NewRedis(rdb) // does no I/O
	if err != nil {
		log.Fatal(err)
	}
	tr, err := throttle.New(nil, st, throttle.WithRule(throttle.Rule{
		Host:    "api.example.com",
		Limits:  []throttle.Limit{throttle.PerSecond(100), throttle.PerHour(50_000)},
		Key:     throttle.ByHost(),
		MaxWait: 10 * time.Second,
	}))
	if err != nil {
		log.Fatal(err) // an invalid configuration fails here, never at request time
	}
	client := &http.Client{Transport: tr}

	resp, err := client.Get("https://api.example.com/v1/items")
	var limited *throttle.LimitError
	switch {
	case errors.As(err, &limited):
		fmt.Println("no slot within 10s; retry after", limited.RetryAfter)
	case err != nil:
		log.Fatal(err)
	default:
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
}
