// Package examplekit is the scaffolding of the example programs and the
// benchmarks: their command-line flags (Flags), the Redis they share or an
// embedded one (StartRedis), and the load they drive and count (Tally).
// Users' tests need none of it; their fake upstreams are in throttletest.
package examplekit
