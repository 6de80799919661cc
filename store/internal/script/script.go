// Package script assembles the Redis scripts of the store from the Lua parts
// beside this file (embedded), so that each rule is written once and each
// script is still one call: one EVALSHA, one round trip.
//
// Each part opens with a comment saying what it needs and gives; together
// they list an assembled script's KEYS, ARGV and reply.
package script

import (
	"embed"
	"strings"
)

//go:embed *.lua
var parts embed.FS

// assemble concatenates the named parts, in order, under a first line that
// names them.
func assemble(title string, names ...string) string {
	var b strings.Builder
	b.WriteString("-- " + title + ": assembled from " + strings.Join(names, ", ") + " (store/internal/script).\n")
	for _, n := range names {
		src, err := parts.ReadFile(n + ".lua")
		if err != nil {
			panic(err) // an embedded file is missing: a build mistake, caught by every test
		}
		b.WriteString("\n")
		b.Write(src)
	}
	return b.String()
}

var (
	// reserve is the reserve script of each algorithm, by its short name
	// (store.Algorithm.String).
	reserve = map[string]string{
		"log":   assemble("reserve log", "time", "prelude", "hold", "nopace", "tat", "write", "noalso", "log"),
		"paced": assemble("reserve paced", "time", "prelude", "hold", "pace", "tat", "write", "noalso", "log"),
		// The log with more keys (store.Request.Also): see also.lua.
		"log+also":   assemble("reserve log+also", "time", "prelude", "hold", "nopace", "tat", "write", "also", "log"),
		"paced+also": assemble("reserve paced+also", "time", "prelude", "hold", "pace", "tat", "write", "also", "log"),
		"fixed":      assemble("reserve fixed", "time", "prelude", "hold", "floor", "counting", "fixed", "counts"),
		"counter":    assemble("reserve counter", "time", "prelude", "hold", "floor", "counting", "counter", "counts"),
		"buckets":    assemble("reserve buckets", "time", "prelude", "hold", "floor", "counting", "buckets"),
	}
	cancel       = assemble("cancel", "cancel")
	cancelPaced  = assemble("cancel paced", "cancel_pace", "cancel")
	cancelCounts = assemble("cancel counts", "floor", "cancel_counts")
	// cancelAlso removes the entries from the logs of more keys, then as
	// cancel (or cancelPaced) from the request's own.
	cancelAlso      = assemble("cancel also", "cancel_also", "cancel")
	cancelPacedAlso = assemble("cancel paced also", "cancel_also", "cancel_pace", "cancel")
	feedback        = assemble("feedback", "time", "feedback")
	// usage reads a key's state without writing (usage.lua); the log's
	// borrows fixed's assembly and uses none of its windows.
	usage = map[string]string{
		"log":     assemble("usage log", "time", "prelude", "hold", "floor", "counting", "fixed", "nopace", "tat", "usage"),
		"paced":   assemble("usage paced", "time", "prelude", "hold", "floor", "counting", "fixed", "pace", "tat", "usage"),
		"fixed":   assemble("usage fixed", "time", "prelude", "hold", "floor", "counting", "fixed", "nopace", "usage"),
		"counter": assemble("usage counter", "time", "prelude", "hold", "floor", "counting", "counter", "nopace", "usage"),
		"buckets": assemble("usage buckets", "time", "prelude", "hold", "floor", "counting", "nopace", "usage"),
	}
	repair = assemble("repair", "time", "repair")
)

// Reserve returns the reserve script of an algorithm named as
// store.Algorithm.String names it ("log", "fixed", "counter", "buckets"), or
// "paced" for the log with a paced limit, "log+also" and "paced+also" for
// the same with more keys (store.Request.Also); "" for any other name: one call
// reserves a send time for a key, or refuses without recording anything.
func Reserve(alg string) string { return reserve[alg] }

// Cancel returns the script that removes the entries of one reservation from
// a key's log.
func Cancel() string { return cancel }

// CancelPaced returns the script that gives back the time of one reservation
// on a paced limit, then removes its entries from the log.
func CancelPaced() string { return cancelPaced }

// CancelAlso returns the script that removes the entries of one reservation
// from the logs of its other keys, then from its own key's (as Cancel), or,
// when paced, also gives back the paced limit's time (as CancelPaced).
func CancelAlso(paced bool) string {
	if paced {
		return cancelPacedAlso
	}
	return cancelAlso
}

// CancelCounts returns the script that gives back the units of one
// reservation of a counting algorithm.
func CancelCounts() string { return cancelCounts }

// Feedback returns the script that records a pause, a learned limit or a
// budget from the upstream beside a key's state, merging with what is there
// without ever loosening it.
func Feedback() string { return feedback }

// Usage returns the read-only script that reports a key's state under an
// algorithm named as store.Algorithm.String names it ("log", "fixed",
// "counter", "buckets"), or "paced" for the log with a paced limit; "" for
// any other.
func Usage(alg string) string { return usage[alg] }

// Repair returns the script that puts a key's state and feedback back into
// a state the reserve scripts can read, after one of them found it in a
// wrong one. It never runs on the common path.
func Repair() string { return repair }
