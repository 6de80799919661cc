package script

// The reserve scripts with a cap on requests in flight: each algorithm's,
// its body wrapped by lease_open and lease_close (one call still takes the
// lease and the reservation), and the operations on one lease.
var (
	leased = map[string]string{
		"log":   assemble("reserve log, leased", "time", "prelude", "hold", "nopace", "tat", "write", "lease", "lease_open", "noalso", "log", "lease_close"),
		"paced": assemble("reserve paced, leased", "time", "prelude", "hold", "pace", "tat", "write", "lease", "lease_open", "noalso", "log", "lease_close"),
		// With more keys (store.Request.Also): the cap stays on the
		// request's own key.
		"log+also":   assemble("reserve log+also, leased", "time", "prelude", "hold", "nopace", "tat", "write", "lease", "lease_open", "also", "log", "lease_close"),
		"paced+also": assemble("reserve paced+also, leased", "time", "prelude", "hold", "pace", "tat", "write", "lease", "lease_open", "also", "log", "lease_close"),
		"fixed":      assemble("reserve fixed, leased", "time", "prelude", "hold", "floor", "counting", "fixed", "lease", "lease_open", "counts", "lease_close"),
		"counter":    assemble("reserve counter, leased", "time", "prelude", "hold", "floor", "counting", "counter", "lease", "lease_open", "counts", "lease_close"),
		"buckets":    assemble("reserve buckets, leased", "time", "prelude", "hold", "floor", "counting", "lease", "lease_open", "buckets", "lease_close"),
	}
	leaseOps = assemble("lease ops", "time", "lease", "lease_ops")
)

// Leased returns Reserve(alg) with a lease taken in the same call, under a
// cap on the key's requests in flight (see lease_open.lua).
func Leased(alg string) string { return leased[alg] }

// LeaseOps returns the script that releases, renews, checks or leaves on one
// lease id (see lease_ops.lua).
func LeaseOps() string { return leaseOps }
