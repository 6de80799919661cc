// Package store keeps the shared state behind throttle: for every rate key, a
// log of send times, and the one atomic step that reserves the next free slot
// in it.
//
// Two implementations share one contract and one conformance suite: Redis, for
// a fleet of processes, and Memory, for one process and for tests.
package store

// The files: memory.go, counters.go and feedback_memory.go are the in-memory
// twin; redis.go, batch.go and script.go (over internal/script) the Redis
// backend. The contract they implement is internal/contract.

import "github.com/throttle-go/throttle/internal/contract"

// Store is the state shared by every transport that limits the same keys:
// pass the one NewRedis or NewMemory returns to throttle.New or
// throttle.NewLimiter. It is safe for concurrent use.
//
// Its methods speak an internal protocol, so no package outside this module
// can implement it: use the Redis store against any Redis-protocol server
// (Cluster and Ring included), the Memory store for one process and for
// tests (docs/redis.md).
type Store = contract.Store
