// Package lua holds the Redis scripts of throttle, embedded from the .lua
// files beside this one so that they can be read, diffed and tested as Lua.
package lua

import _ "embed"

// Reserve is the source of reserve.lua: one call reserves a send time in a
// key's sliding log, or refuses without recording anything. Its header lists KEYS,
// ARGV and the reply.
//
//go:embed reserve.lua
var Reserve string

// Cancel is the source of cancel.lua: it removes the entries of one
// reservation from a key's log.
//
//go:embed cancel.lua
var Cancel string

// Feedback is the source of feedback.lua: it records a pause, a learned limit
// or a budget from the upstream beside a key's log, merging with what is there
// without ever loosening it.
//
//go:embed feedback.lua
var Feedback string

// Fixed, Counter and Buckets are the sources of fixed.lua, counter.lua and
// buckets.lua: the reserve step of the counting algorithms, with the reply of
// reserve.lua.
var (
	//go:embed fixed.lua
	Fixed string
	//go:embed counter.lua
	Counter string
	//go:embed buckets.lua
	Buckets string
)

// CancelCounts is the source of cancel_counts.lua: it gives back the units of
// one reservation of Fixed, Counter or Buckets.
//
//go:embed cancel_counts.lua
var CancelCounts string
