package contract

import (
	"context"
	"time"
)

// LeaseUsage is the state of a key's cap on requests in flight
// (Request.InFlight) at one moment: the leases held and the requests
// waiting for one.
type LeaseUsage struct {
	// Held counts the leases not expired.
	Held int
	// Queued counts the waiters in the key's queue whose deadline has not
	// passed (of the first MaxQueueRead; QueueMore says there are more).
	Queued    int
	QueueMore bool
	// Earliest is how long until the earliest held lease expires unless
	// renewed (0: none held).
	Earliest time.Duration
}

// MaxQueueRead bounds the waiters LeaseUsage reads of a queue.
const MaxQueueRead = 1000

// LeaseInspector is the part of a store that reads a key's leases and
// queue without changing them, for the operator's tools: Redis and Memory.
type LeaseInspector interface {
	// LeaseUsage reports the leases and the queue of key. A key that never
	// had a cap reports zeros.
	LeaseUsage(ctx context.Context, key string) (LeaseUsage, error)
}
