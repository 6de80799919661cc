package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

// A message producer may publish 2 messages per second to a queue, from any
// machine of the fleet; a publish that would have to wait more than 100ms
// gives up and is requeued.
func ExampleLimiter() {
	st, err := store.NewMemory() // store.NewRedis(client) for a fleet
	if err != nil {
		panic(err)
	}
	lim, err := throttle.NewLimiter(st, throttle.Rule{
		Name:    "orders-queue",
		Limits:  []throttle.Limit{throttle.PerSecond(2)},
		MaxWait: 100 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		var le *throttle.LimitError
		switch err := lim.Wait(ctx, "queue:orders", 1); {
		case errors.As(err, &le):
			fmt.Printf("message %d: requeued, retry in about %s\n", i, le.RetryAfter.Round(time.Second))
		case err != nil:
			panic(err)
		default:
			fmt.Printf("message %d: published\n", i)
		}
	}
	// Output:
	// message 1: published
	// message 2: published
	// message 3: requeued, retry in about 1s
}

// Allow never waits: a call without a free slot now is refused, and nothing
// is recorded.
func ExampleLimiter_Allow() {
	st, err := store.NewMemory()
	if err != nil {
		panic(err)
	}
	lim, err := throttle.NewLimiter(st, throttle.Rule{Name: "reports", Limits: []throttle.Limit{throttle.PerHour(2)}})
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 3; i++ {
		ok, err := lim.Allow(context.Background(), "tenant:acme", 1)
		if err != nil {
			panic(err) // the store failed (refused: the default)
		}
		fmt.Printf("report %d: %v\n", i, ok)
	}
	fmt.Println("limited:", lim.Stats().Rules[0].Requests[throttle.Limited])
	// Output:
	// report 1: true
	// report 2: true
	// report 3: false
	// limited: 1
}

// Reserve takes a slot without waiting for it: the caller sees the delay and
// decides. Cancel gives the slot back to the others.
func ExampleLimiter_Reserve() {
	st, err := store.NewMemory()
	if err != nil {
		panic(err)
	}
	lim, err := throttle.NewLimiter(st, throttle.Rule{
		Name:    "exports",
		Limits:  []throttle.Limit{throttle.PerHour(1)},
		MaxWait: 2 * time.Hour,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		r, err := lim.Reserve(ctx, "exports", 1)
		if err != nil {
			panic(err)
		}
		if d := r.Delay(); d > time.Minute {
			fmt.Printf("export %d: not before %s from now; canceled\n", i, d.Round(time.Hour))
			r.Cancel()
			continue
		}
		if err := r.Wait(ctx); err != nil {
			panic(err)
		}
		fmt.Printf("export %d: started\n", i)
	}
	// Output:
	// export 1: started
	// export 2: not before 1h0m0s from now; canceled
}
