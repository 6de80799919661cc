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
	"fmt"
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

// The parts each family of scripts starts with, and those of the cap on
// requests in flight (leaseParts: the log's keys have no TTL of expire's).
var (
	logParts      = []string{"time", "request", "prelude", "hold", "pace", "write"}
	countingParts = []string{"time", "expire", "request", "hold", "floor", "counting"}
	leaseParts    = []string{"expire", "lease", "leased"}
)

// with returns base followed by more, in a new slice.
func with(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

// parse is a main's first line: the request as parse_request reads it for
// kind, with or without a paced limit, more keys and a cap, named for the
// calls after it (head is the log's allowance, or usage's algorithm).
func parse(kind, head string, paced, also, leased bool) string {
	return fmt.Sprintf("local now, cost, max_wait, server_wait, key, fb, pace_key, %s, limits, pace, more, lease, seen =\n"+
		"  parse_request('%s', %t, %t, %t) -- kind, paced, more keys, leased\n", head, kind, paced, also, leased)
}

// The calls of the log's body, without and with more keys.
const (
	logCall  = "log_reserve(now, cost, max_wait, server_wait, key, fb, pace_key, seen, allowance, limits, pace)"
	alsoCall = "log_reserve(now, cost, max_wait, server_wait, key, fb, pace_key, seen, allowance, limits, pace, more, also_slot, also_record)"
)

// logMain is the main of a reserve script of the log.
func logMain(paced, also, leased bool) string {
	call := logCall
	if also {
		call = alsoCall
	}
	if leased {
		// leased calls log_reserve with the arguments after it.
		call = "leased(lease, now, max_wait, " + strings.Replace(call, "(", ", ", 1)
	}
	return parse("log", "allowance", paced, also, leased) + "return reserve_reply(" + call + ")"
}

// windows is the arguments that give counts_reserve and usage_counts the
// windows win, fixed or counter: its within and LOOKBACK.
func windows(win string) string {
	return win + "_within, " + strings.ToUpper(win) + "_LOOKBACK"
}

// lanesMain is the main of the log's reserve script over priority lanes
// (lanes.lua): KEYS the log's four, the index of yielding slots, the
// bumped set; ARGV the log's, then lane, yield (1/0), token and held (the
// member to confirm, or "").
func lanesMain(paced bool) string {
	return `local nargs = #ARGV
local lane, yield, token, held = ARGV[nargs - 3] + 0, ARGV[nargs - 2] == '1', ARGV[nargs - 1], ARGV[nargs]
for _ = 1, 4 do table.remove(ARGV) end
` + parse("log", "allowance", paced, false, false) +
		"return lane_reply(lane_reserve(KEYS[5], KEYS[6], lane, yield, token, held, nil,\n" +
		"  now, cost, max_wait, server_wait, key, fb, pace_key, seen, allowance, limits, pace))"
}

// tenantsMain is the main of the log's reserve script for a tenant's
// request (lanes.lua, tenants): KEYS the lanes' six, then the tenants' set;
// ARGV the lanes', then the tenant's hashed name, its step, and a retake's
// tag ("" for a new request).
func tenantsMain(paced bool) string {
	return `local nargs = #ARGV
local yield, token, held = ARGV[nargs - 5] == '1', ARGV[nargs - 4], ARGV[nargs - 3]
local ten = { key = KEYS[7], member = ARGV[nargs - 2], step = ARGV[nargs - 1] + 0,
  again = ARGV[nargs] ~= '', tag = tonumber(ARGV[nargs]) }
for _ = 1, 7 do table.remove(ARGV) end
` + parse("log", "allowance", paced, false, false) +
		"return lane_reply(lane_reserve(KEYS[5], KEYS[6], 0, yield, token, held, ten,\n" +
		"  now, cost, max_wait, server_wait, key, fb, pace_key, seen, allowance, limits, pace))"
}

// countingMain is the main of a reserve script of a counting algorithm:
// body is counts_reserve with the windows win, fixed or counter, or
// buckets_reserve.
func countingMain(leased bool, body, win string) string {
	args := "now, cost, max_wait, server_wait, key, fb, limits"
	if win != "" {
		args += ", " + windows(win) + ", " + strings.ToUpper(win) + "_WEIGH"
	}
	call := body + "(" + args + ")"
	if leased {
		call = "leased(lease, now, max_wait, " + body + ", " + args + ")"
	}
	return parse("counting", "_", false, false, leased) + "return reserve_reply(" + call + ")"
}

// usageMain is the main of a usage script: state is usage_log or
// usage_counts, with the windows win, fixed or counter, or "".
func usageMain(paced bool, state, win string) string {
	call := "usage(" + state + ", now, cost, max_wait, key, fb, pace_key, alg, limits, pace"
	if win != "" {
		call += ", " + windows(win)
	}
	return parse("usage", "alg", paced, false, false) + "return " + call + ")"
}

// recipes lists every script the store runs. Under a cap on requests in
// flight (", leased"), the reservation runs inside leased (one call still
// takes the lease and the reservation); with more keys (store.Request.Also,
// "+also") the log counts and records them with also's functions, the cap
// staying on the request's own key.
var recipes = []recipe{
	{"reserve log", with(logParts, "log"), logMain(false, false, false)},
	{"reserve paced", with(logParts, "log"), logMain(true, false, false)},
	{"reserve log+also", with(logParts, "units", "also", "log"), logMain(false, true, false)},
	{"reserve paced+also", with(logParts, "units", "also", "log"), logMain(true, true, false)},
	{"reserve fixed", with(countingParts, "fixed", "counts"), countingMain(false, "counts_reserve", "fixed")},
	{"reserve counter", with(countingParts, "counter", "counts"), countingMain(false, "counts_reserve", "counter")},
	{"reserve buckets", with(countingParts, "buckets"), countingMain(false, "buckets_reserve", "")},

	{"reserve log, leased", with(logParts, append([]string{"log"}, leaseParts...)...), logMain(false, false, true)},
	{"reserve paced, leased", with(logParts, append([]string{"log"}, leaseParts...)...), logMain(true, false, true)},
	{"reserve log+also, leased", with(logParts, append([]string{"units", "also", "log"}, leaseParts...)...), logMain(false, true, true)},
	{"reserve paced+also, leased", with(logParts, append([]string{"units", "also", "log"}, leaseParts...)...), logMain(true, true, true)},
	{"reserve fixed, leased", with(countingParts, "fixed", "counts", "lease", "leased"), countingMain(true, "counts_reserve", "fixed")},
	{"reserve counter, leased", with(countingParts, "counter", "counts", "lease", "leased"), countingMain(true, "counts_reserve", "counter")},
	{"reserve buckets, leased", with(countingParts, "buckets", "lease", "leased"), countingMain(true, "buckets_reserve", "")},

	// Priority lanes (lanes.lua, lanesMain).
	{"reserve log, lanes", with(logParts, "log", "lanes"), lanesMain(false)},
	{"reserve paced, lanes", with(logParts, "log", "lanes"), lanesMain(true)},
	{"reserve log, tenants", with(logParts, "log", "lanes"), tenantsMain(false)},
	{"reserve paced, tenants", with(logParts, "log", "lanes"), tenantsMain(true)},
	// A yielding reservation's cancel: KEYS the log, its seen mark, the
	// index, the bumped set; ARGV entry, cost, member. A slot a higher
	// lane took is that one's now: nothing is removed.
	{"cancel lanes", []string{"cancel"}, `
if redis.call('SREM', KEYS[4], ARGV[3]) == 1 then return 0 end
redis.call('ZREM', KEYS[3], ARGV[3])
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]), KEYS[2])`},
	{"cancel", []string{"cancel"}, `
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]), KEYS[2])`},
	{"cancel paced", []string{"cancel_pace", "cancel"}, `
cancel_pace(KEYS[2], ARGV[3], ARGV[4])
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]), KEYS[3])`},
	{"cancel also", []string{"cancel", "cancel_also"}, `
cancel_also(KEYS, #KEYS - tonumber(ARGV[#ARGV]) + 1, ARGV[1], tonumber(ARGV[2]))
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]), KEYS[2])`},
	{"cancel paced also", []string{"cancel", "cancel_also", "cancel_pace"}, `
cancel_also(KEYS, #KEYS - tonumber(ARGV[#ARGV]) + 1, ARGV[1], tonumber(ARGV[2]))
cancel_pace(KEYS[2], ARGV[3], ARGV[4])
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]), KEYS[3])`},
	// A reservation with units (units.lua): its units settled to 0, its
	// other keys' entries and its own removed, its paced time given back.
	// KEYS: the log, the pace key, p other logs, the units' keys, the
	// log's seen mark; ARGV:
	// entry, cost, TAT (0: none), back, p, now, then per unit estimate,
	// 0, spacing (settle.lua).
	{"cancel units", []string{"time", "cancel", "cancel_pace", "settle"}, `
local p = tonumber(ARGV[5])
for i = 3, 2 + p do cancel_entries(KEYS[i], ARGV[1], tonumber(ARGV[2])) end
settle_units(KEYS, 3 + p, ARGV, 7, tonumber(ARGV[1]), clock(ARGV[6]))
if ARGV[3] ~= '0' then cancel_pace(KEYS[2], ARGV[3], ARGV[4]) end
return cancel_entries(KEYS[1], ARGV[1], tonumber(ARGV[2]), KEYS[#KEYS])`},
	// Settle: ARGV now, entry, then per unit estimate, actual, spacing.
	{"settle", []string{"time", "settle"}, `
return settle_units(KEYS, 1, ARGV, 3, tonumber(ARGV[2]), clock(ARGV[1]))`},
	// The keys of a request in another Cluster slot than its own key's
	// (slots.lua): reserved, or moved later, in a call of their own; and
	// their cancel.
	{"reserve parts", with(logParts, "units", "also", "cancel", "settle", "slots"), parse("log", "allowance", false, true, false) +
		"return reserve_reply(parts_reserve(now, cost, max_wait, allowance, more))"},
	// KEYS: p logs, then per unit its log and sum; ARGV: entry, cost, p,
	// now, then per unit estimate, 0, spacing (settle.lua).
	{"cancel parts", []string{"time", "cancel", "settle"}, `
local p = tonumber(ARGV[3])
for i = 1, p do cancel_entries(KEYS[i], ARGV[1], tonumber(ARGV[2])) end
settle_units(KEYS, p + 1, ARGV, 5, tonumber(ARGV[1]), clock(ARGV[4]))
return 0`},
	{"cancel counts", []string{"floor", "cancel_counts"}, `
return cancel_counts(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1', ARGV, 4)`},

	{"feedback", []string{"time", "expire", "feedback"}, `
return record_feedback(KEYS[1], KEYS[2], parse_feedback())`},
	{"repair", []string{"time", "repair"}, `
return repair(KEYS[1], KEYS[2], KEYS[3], ARGV[1], clock(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))`},
	{"lease ops", []string{"time", "expire", "lease", "lease_ops"}, `
return lease_op(ARGV[1], KEYS[1], KEYS[2], clock(ARGV[2]), ARGV[3] + 0, ARGV[4] + 0, ARGV[5], ARGV[6])`},

	// The usage scripts read a key's state without writing (usage.lua).
	{"usage log", []string{"time", "request", "prelude", "hold", "pace", "usage", "usage_log"}, usageMain(false, "usage_log", "")},
	{"usage paced", []string{"time", "request", "prelude", "hold", "pace", "usage", "usage_log"}, usageMain(true, "usage_log", "")},
	{"usage fixed", with(countingParts, "fixed", "usage", "usage_counts"), usageMain(false, "usage_counts", "fixed")},
	{"usage counter", with(countingParts, "counter", "usage", "usage_counts"), usageMain(false, "usage_counts", "counter")},
	{"usage buckets", with(countingParts, "usage", "usage_counts"), usageMain(false, "usage_counts", "")},
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

// Lanes returns the log's reserve script over priority lanes (lanes.lua),
// with a paced limit when paced.
func Lanes(paced bool) string {
	if paced {
		return scripts["reserve paced, lanes"]
	}
	return scripts["reserve log, lanes"]
}

// Tenants returns the log's reserve script for a tenant's request
// (lanes.lua, tenants), with a paced limit when paced.
func Tenants(paced bool) string {
	if paced {
		return scripts["reserve paced, tenants"]
	}
	return scripts["reserve log, tenants"]
}

// CancelLanes returns the cancel of a reservation that yields (lanes.lua).
func CancelLanes() string { return scripts["cancel lanes"] }

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

// CancelUnits returns the script that cancels a reservation with units
// (store.Part.Unit): its units settled to 0, its entries removed from its
// other keys' logs and its own, its paced time given back.
func CancelUnits() string { return scripts["cancel units"] }

// Settle returns the script that changes the cost a reservation recorded in
// its units from the estimate to the actual (settle.lua).
func Settle() string { return scripts["settle"] }

// ReserveParts returns the script that reserves, or moves later, a
// request's units in the logs of its keys that lie in one Cluster slot other
// than its own key's (slots.lua).
func ReserveParts() string { return scripts["reserve parts"] }

// CancelParts returns the script that removes a reservation's entries from
// the logs of its keys in one Cluster slot other than its own key's.
func CancelParts() string { return scripts["cancel parts"] }

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
