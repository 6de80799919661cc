// Package script assembles the Redis scripts of the store from the Lua parts
// beside this file (embedded), so that each rule is written once and each
// script is still one call: one EVALSHA, one round trip.
//
// Each part defines local functions over explicit arguments, and opens with
// a comment saying what it takes and gives; a script is its parts in order,
// then a short main that calls them (recipes lists them all). request.lua
// lists the KEYS, ARGV and reply of the reserve scripts.
package script

import (
	"embed"
	"strings"
)

//go:embed *.lua
var parts embed.FS

// recipe is one script: its name (as store.Scripts names it), its parts in
// order, and its main, the Lua after them that reads the call and runs it.
type recipe struct {
	name  string
	parts []string
	main  string
}

// The parts each family of scripts starts with.
var (
	logParts      = []string{"time", "request", "prelude", "hold", "pace", "write"}
	countingParts = []string{"time", "request", "hold", "floor", "counting"}
)

// with returns base followed by more, in a new slice.
func with(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

// recipes lists every script the store runs. Under a cap on requests in
// flight (", leased"), the reservation runs inside leased (one call still
// takes the lease and the reservation); with more keys (store.Request.Also,
// "+also") the log counts and records them with also's functions, the cap
// staying on the request's own key.
var recipes = []recipe{
	{"reserve log", with(logParts, "log"), `
local req = parse_request('log', false, false, false) -- kind, paced, more keys, leased
return reserve_reply(log_reserve(req))`},
	{"reserve paced", with(logParts, "log"), `
local req = parse_request('log', true, false, false) -- kind, paced, more keys, leased
return reserve_reply(log_reserve(req))`},
	{"reserve log+also", with(logParts, "also", "log"), `
local req = parse_request('log', false, true, false) -- kind, paced, more keys, leased
return reserve_reply(log_reserve(req, also_slot, also_record))`},
	{"reserve paced+also", with(logParts, "also", "log"), `
local req = parse_request('log', true, true, false) -- kind, paced, more keys, leased
return reserve_reply(log_reserve(req, also_slot, also_record))`},
	{"reserve fixed", with(countingParts, "fixed", "counts"), `
local req = parse_request('counting', false, false, false) -- kind, paced, more keys, leased
return reserve_reply(counts_reserve(req, fixed))`},
	{"reserve counter", with(countingParts, "counter", "counts"), `
local req = parse_request('counting', false, false, false) -- kind, paced, more keys, leased
return reserve_reply(counts_reserve(req, counter))`},
	{"reserve buckets", with(countingParts, "buckets"), `
local req = parse_request('counting', false, false, false) -- kind, paced, more keys, leased
return reserve_reply(buckets_reserve(req))`},

	{"reserve log, leased", with(logParts, "log", "lease", "leased"), `
local req = parse_request('log', false, false, true) -- kind, paced, more keys, leased
return reserve_reply(leased(req, log_reserve))`},
	{"reserve paced, leased", with(logParts, "log", "lease", "leased"), `
local req = parse_request('log', true, false, true) -- kind, paced, more keys, leased
return reserve_reply(leased(req, log_reserve))`},
	{"reserve log+also, leased", with(logParts, "also", "log", "lease", "leased"), `
local req = parse_request('log', false, true, true) -- kind, paced, more keys, leased
return reserve_reply(leased(req, log_reserve, also_slot, also_record))`},
	{"reserve paced+also, leased", with(logParts, "also", "log", "lease", "leased"), `
local req = parse_request('log', true, true, true) -- kind, paced, more keys, leased
return reserve_reply(leased(req, log_reserve, also_slot, also_record))`},
	{"reserve fixed, leased", with(countingParts, "fixed", "counts", "lease", "leased"), `
local req = parse_request('counting', false, false, true) -- kind, paced, more keys, leased
return reserve_reply(leased(req, counts_reserve, fixed))`},
	{"reserve counter, leased", with(countingParts, "counter", "counts", "lease", "leased"), `
local req = parse_request('counting', false, false, true) -- kind, paced, more keys, leased
return reserve_reply(leased(req, counts_reserve, counter))`},
	{"reserve buckets, leased", with(countingParts, "buckets", "lease", "leased"), `
local req = parse_request('counting', false, false, true) -- kind, paced, more keys, leased
return reserve_reply(leased(req, buckets_reserve))`},

	{"cancel", []string{"cancel"}, `
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]))`},
	{"cancel paced", []string{"cancel_pace", "cancel"}, `
cancel_pace(KEYS[2], ARGV[3], ARGV[4])
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]))`},
	{"cancel also", []string{"cancel", "cancel_also"}, `
cancel_also(KEYS, #KEYS - tonumber(ARGV[#ARGV]) + 1, ARGV[1], tonumber(ARGV[2]))
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]))`},
	{"cancel paced also", []string{"cancel", "cancel_also", "cancel_pace"}, `
cancel_also(KEYS, #KEYS - tonumber(ARGV[#ARGV]) + 1, ARGV[1], tonumber(ARGV[2]))
cancel_pace(KEYS[2], ARGV[3], ARGV[4])
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]))`},
	{"cancel counts", []string{"floor", "cancel_counts"}, `
return cancel_counts(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1', ARGV, 4)`},

	{"feedback", []string{"time", "feedback"}, `
return record_feedback(KEYS[1], KEYS[2], parse_feedback())`},
	{"repair", []string{"time", "repair"}, `
return repair(KEYS[1], KEYS[2], KEYS[3], ARGV[1], clock(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))`},
	{"lease ops", []string{"time", "lease", "lease_ops"}, `
return lease_op(ARGV[1], KEYS[1], KEYS[2], clock(ARGV[2]), ARGV[3] + 0, ARGV[4] + 0, ARGV[5], ARGV[6])`},

	// The usage scripts read a key's state without writing (usage.lua).
	{"usage log", []string{"time", "request", "prelude", "hold", "pace", "usage", "usage_log"}, `
return usage(parse_request('usage', false, false, false), usage_log) -- kind, paced, more keys, leased`},
	{"usage paced", []string{"time", "request", "prelude", "hold", "pace", "usage", "usage_log"}, `
return usage(parse_request('usage', true, false, false), usage_log) -- kind, paced, more keys, leased`},
	{"usage fixed", with(countingParts, "fixed", "usage", "usage_counts"), `
return usage(parse_request('usage', false, false, false), usage_counts, fixed) -- kind, paced, more keys, leased`},
	{"usage counter", with(countingParts, "counter", "usage", "usage_counts"), `
return usage(parse_request('usage', false, false, false), usage_counts, counter) -- kind, paced, more keys, leased`},
	{"usage buckets", with(countingParts, "usage", "usage_counts"), `
return usage(parse_request('usage', false, false, false), usage_counts) -- kind, paced, more keys, leased`},
}

// scripts is every recipe assembled, by name.
var scripts = assembleAll(recipes)

func assembleAll(rs []recipe) map[string]string {
	out := make(map[string]string, len(rs))
	for _, r := range rs {
		if _, ok := out[r.name]; ok {
			panic("script: two recipes named " + r.name) // a build mistake, caught by every test
		}
		out[r.name] = assemble(r)
	}
	return out
}

// assemble concatenates the parts of r, in order, under a first line that
// names them, then its main.
func assemble(r recipe) string {
	var b strings.Builder
	b.WriteString("-- " + r.name + ": assembled from " + strings.Join(r.parts, ", ") + " (store/internal/script).\n")
	for _, n := range r.parts {
		src, err := parts.ReadFile(n + ".lua")
		if err != nil {
			panic(err) // an embedded file is missing: a build mistake, caught by every test
		}
		b.WriteString("\n")
		b.Write(src)
	}
	b.WriteString("\n-- main: " + r.name + "\n")
	b.WriteString(strings.TrimPrefix(r.main, "\n") + "\n")
	return b.String()
}

// All returns every script by name, as Reserve, Leased, Cancel and the
// other functions below give them: the source of the files of Dir.
func All() map[string]string {
	out := make(map[string]string, len(scripts))
	for name, src := range scripts {
		out[name] = src
	}
	return out
}

// Reserve returns the reserve script of an algorithm named as
// store.Algorithm.String names it ("log", "fixed", "counter", "buckets"), or
// "paced" for the log with a paced limit, "log+also" and "paced+also" for
// the same with more keys (store.Request.Also); "" for any other name: one call
// reserves a send time for a key, or refuses without recording anything.
func Reserve(alg string) string { return scripts["reserve "+alg] }

// Leased returns Reserve(alg) with a lease taken in the same call, under a
// cap on the key's requests in flight (see leased.lua).
func Leased(alg string) string { return scripts["reserve "+alg+", leased"] }

// LeaseOps returns the script that releases, renews, checks or leaves on one
// lease id (see lease_ops.lua).
func LeaseOps() string { return scripts["lease ops"] }

// Cancel returns the script that removes the entries of one reservation from
// a key's log.
func Cancel() string { return scripts["cancel"] }

// CancelPaced returns the script that gives back the time of one reservation
// on a paced limit, then removes its entries from the log.
func CancelPaced() string { return scripts["cancel paced"] }

// CancelAlso returns the script that removes the entries of one reservation
// from the logs of its other keys, then from its own key's (as Cancel), or,
// when paced, also gives back the paced limit's time (as CancelPaced).
func CancelAlso(paced bool) string {
	if paced {
		return scripts["cancel paced also"]
	}
	return scripts["cancel also"]
}

// CancelCounts returns the script that gives back the units of one
// reservation of a counting algorithm.
func CancelCounts() string { return scripts["cancel counts"] }

// Feedback returns the script that records a pause, a learned limit or a
// budget from the upstream beside a key's state, merging with what is there
// without ever loosening it.
func Feedback() string { return scripts["feedback"] }

// Usage returns the read-only script that reports a key's state under an
// algorithm named as store.Algorithm.String names it ("log", "fixed",
// "counter", "buckets"), or "paced" for the log with a paced limit; "" for
// any other.
func Usage(alg string) string { return scripts["usage "+alg] }

// Repair returns the script that puts a key's state and feedback back into
// a state the reserve scripts can read, after one of them found it in a
// wrong one. It never runs on the common path.
func Repair() string { return scripts["repair"] }
