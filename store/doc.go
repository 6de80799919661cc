// Package store keeps the shared state behind throttle: for every rate key, a
// log of send times, and the one atomic step that reserves the next free slot
// in it.
//
// Two implementations share one contract and one conformance suite: Redis, for
// a fleet of processes, and Memory, for one process and for tests.
package store

// The files: new.go is the public face of the two backends (constructors,
// options, bounds, errors), acl.go the Redis ACL rule. The backends are
// internal: internal/redisstore (with the Lua of internal/script) and
// internal/memstore; the contract they implement is the module's
// internal/contract. The conformance suite, here, runs them side by side.

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
