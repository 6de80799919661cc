package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

type report struct {
	cfg          config
	redisVersion string
	began        time.Time
	took         time.Duration
	svg          string
	loadStart    string
	loadEnd      string
	decisions    []decisionResult
	growth       []growthResult
	memory       []memoryResult
	inproc       []inprocResult
	fleet        []fleetResult
}

type target struct {
	what, measured string
	pass           bool
}

func (r *report) find(name string, c int) *decisionResult {
	for i := range r.decisions {
		if r.decisions[i].name == name && r.decisions[i].callers == c {
			return &r.decisions[i]
		}
	}
	return nil
}

func (r *report) growthOf(kind, mode string, size int) *growthResult {
	for i := range r.growth {
		g := &r.growth[i]
		if g.kind == kind && g.mode == mode && g.size == size {
			return g
		}
	}
	return nil
}

func (r *report) inprocOf(name, path string, parallel bool) *inprocResult {
	for i := range r.inproc {
		x := &r.inproc[i]
		if x.name == name && x.path == path && x.parallel == parallel {
			return x
		}
	}
	return nil
}

func (r *report) targets() []target {
	var ts []target
	if d := r.find(kThrottle, 1); d != nil {
		ts = append(ts, target{"decision p50 ≤ 1.3× PING at 1 caller", fmt.Sprintf("%.2f× (store.Redis Reserve)", d.p50Ping), d.p50Ping <= 1.3})
	}
	// Throughput and Redis CPU at 32 callers are judged on the better of
	// throttle's two stores, named in the cell; both rows are in the table.
	if d := r.find(kThrottle, 32); d != nil {
		name := "store.Redis"
		if b := r.find(kThrottleB, 32); b != nil && b.vsRedisRate > d.vsRedisRate {
			d, name = b, "store.Redis with WithBatching"
		}
		ts = append(ts, target{"decisions per second at 32 callers ≥ 1.05× redis_rate's", fmt.Sprintf("%.2f× (%s)", d.vsRedisRate, name), d.vsRedisRate >= 1.05})
		ts = append(ts, target{"Redis CPU per decision ≤ redis_rate's (32 callers)", fmt.Sprintf("%.2f× (%s)", d.cpuVsRedisRate, name), d.cpuVsRedisRate <= 1.0})
	}
	for _, mode := range []string{"full", "admitted"} {
		a, b := r.growthOf(kThrottle, mode, 100), r.growthOf(kThrottle, mode, 100_000)
		if a != nil && b != nil {
			x := b.scriptUS / a.scriptUS
			ts = append(ts, target{"cost of a decision (the script's time in Redis) at 100,000 live entries ≤ 1.2× at 100 (" + mode + " log)", fmt.Sprintf("%.2f× (%.1f µs vs %.1f µs)", x, b.scriptUS, a.scriptUS), x <= 1.2})
		}
	}
	for _, m := range r.memory {
		if m.kind == kThrottle && m.entries > 0 {
			x := float64(m.bytes) / float64(m.entries)
			ts = append(ts, target{"≤ 12 bytes of Redis memory per logged request", fmt.Sprintf("%.1f bytes (%d entries)", x, m.entries), x <= 12})
		}
	}
	if g := r.growthOf(kThrottle, "full", 100_000); g != nil {
		ts = append(ts, target{"≤ 12 bytes of Redis memory per logged request at 100,000 entries", fmt.Sprintf("%.1f bytes", g.bytesPE), g.bytesPE <= 12})
	}
	for _, f := range r.fleet {
		if !strings.HasPrefix(f.name, "throttle (wait, default") {
			continue
		}
		ts = append(ts,
			target{"fleet, " + f.load + ": zero 429s", fmt.Sprint(f.tooMany), f.tooMany == 0},
			target{"fleet, " + f.load + ": ≥ 99 % of the allowed rate, as accepted / optimum over the run", fmt.Sprintf("%.1f %%", 100*f.share()), f.share() >= 0.99},
			target{"fleet, " + f.load + ": ≥ 99 % of the allowed rate, as the steady share (the margin and the allowance cost their sum over W)", fmt.Sprintf("%.1f %%", 100*f.steady), f.steady >= 0.99},
			target{"fleet, " + f.load + ": ≤ 1.05 Redis calls per sent request", fmt.Sprintf("%.3f", f.callsPerSent), f.callsPerSent <= 1.05},
		)
	}
	// The memory store's targets are judged on every path of the table:
	// admitted and refused, serially and in parallel.
	for _, path := range []string{"admitted", "refused"} {
		for _, parallel := range []bool{false, true} {
			m, x, g := r.inprocOf("throttle store.Memory Reserve", path, parallel), r.inprocOf("x/time/rate AllowN", path, parallel), r.inprocOf("go-limiter memorystore Take", path, parallel)
			if m == nil || x == nil || g == nil {
				continue
			}
			how := path + ", serial"
			if parallel {
				how = path + ", parallel"
			}
			ts = append(ts,
				target{"memory store decision within 2× of x/time/rate AllowN (" + how + ")", fmt.Sprintf("%.2f× (%.1f ns vs %.1f ns)", m.ns/x.ns, m.ns, x.ns), m.ns <= 2*x.ns},
				target{"memory store decision faster than go-limiter memorystore Take (" + how + ")", fmt.Sprintf("%.2f× (%.1f ns vs %.1f ns)", m.ns/g.ns, m.ns, g.ns), m.ns < g.ns})
		}
	}
	if rt := r.inprocOf("throttle Transport.RoundTrip (memory store)", "admitted", false); rt != nil {
		ts = append(ts, target{"≤ 3 allocations per RoundTrip, allowed path, memory store", fmt.Sprint(rt.allocs), rt.allocs <= 3})
	}
	return ts
}

func passMiss(ok bool) string {
	if ok {
		return "**PASS**"
	}
	return "**MISS**"
}

// loadAverage is the 1-minute load average from /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown"
}

func moduleVersions() string {
	return moduleVersionsOf("github.com/go-redis/redis_rate/v10", "github.com/ulule/limiter/v3", "github.com/sethvargo/go-limiter",
		"golang.org/x/time", "github.com/redis/go-redis/v9")
}

// moduleVersionsOf lists the versions of the modules paths this binary was
// built with, in the build's order.
func moduleVersionsOf(paths ...string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var parts []string
	for _, d := range bi.Deps {
		if slices.Contains(paths, d.Path) {
			parts = append(parts, "`"+d.Path+"` "+d.Version)
		}
	}
	return strings.Join(parts, ", ")
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Benchmarks\n\n")
	p("Generated by the benchmark suite in `bench/` (its own Go module, so the peers never enter throttle's `go.mod`). Regenerate everything, this file and the picture, with one command from the repository root:\n\n")
	p("```sh\ncd bench && go run . -out ../BENCHMARKS.md -svg ../docs/fleet.svg\n```\n\n")
	p("`go run . -quick` is a smoke run (one repetition, short runs) that prints the report instead. The suite starts its own `redis-server` from `PATH` on a free loopback port (`--save ''`, `--appendonly no`), empties it and resets its statistics (`FLUSHALL`, `CONFIG RESETSTAT`) before every row, and stops it at the end, on a signal or a panic.\n\n")
	if r.cfg.quick {
		p("> **This is a `-quick` run**: one repetition of short runs. Its figures are rough; rerun without `-quick` for the published ones.\n\n")
	}
	p("| | |\n|---|---|\n")
	p("| date | %s |\n", r.began.Format("2006-01-02 15:04 UTC"))
	p("| command | `%s` |\n", r.cfg.command)
	p("| machine | %s, %d cores (`runtime.NumCPU`), %s/%s |\n", cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	p("| Go | %s |\n", runtime.Version())
	p("| redis-server | %s, on loopback, the same machine |\n", r.redisVersion)
	p("| peers | %s |\n", moduleVersions())
	p("| repetitions | %d per decision row and per in-process row (short runs, limiters in turn, so that a burst of other work hits few of them), %d per other row; the tables give medians, and ratios are taken within a repetition |\n", r.cfg.decisionReps, r.cfg.reps)
	p("| run time | %s |\n", r.took.Round(time.Second))
	p("| load average (1 min) | %s at the start, %s at the end (%d cores: above that, other work competed with the run) |\n\n", r.loadStart, r.loadEnd, runtime.NumCPU())
	p("The machine is small: client, Redis and (in the fleet) upstream share its cores, so absolute times move from run to run. Compare within a table; the ratios are what the targets judge.\n\n")

	if ts := r.targets(); len(ts) > 0 {
		p("## Targets\n\n| target | measured | |\n|---|---|---|\n")
		for _, t := range ts {
			p("| %s | %s | %s |\n", t.what, t.measured, passMiss(t.pass))
		}
		p("\n")
	}

	if len(r.decisions) > 0 {
		p("## One decision\n\n")
		p("Each limiter decides for one request at a time on %d keys taken in turn, under a limit of %d per %s per key that never refuses, so these rows measure a decision and not a log's length (the next table does that). Each row runs for %s after a warm-up, %d times (the medians are shown), at 1 and at 32 concurrent callers (goroutines of one process sharing a go-redis pool of 40). At 1 caller, p50 and p99 come instead from a pass that calls the limiters in turn, one call each per round (each round starting one limiter further on), for %s per repetition: one caller's latency depends on how deeply the cores sleep between calls, which drifts over a run, and in turn every limiter meets the same state. *× PING* is the latency's ratio to a `PING` measured the same way in the same repetition. *Redis CPU* is the server's `used_cpu_sys + used_cpu_user` (INFO cpu) over the row divided by its decisions. *Client CPU* is this process's user + system time (getrusage) over the row per decision: the client's side, go-redis included. *Commands* counts every command the server ran (INFO commandstats, those inside scripts and transactions included); *round trips* counts what the client sent (a go-redis hook: one per command, pipeline or transaction).\n\n", decisionKeys, decisionLimit.N, decisionLimit.Per, r.cfg.decisionTime, r.cfg.decisionReps, 2*r.cfg.decisionTime)
		for _, c := range []int{1, 32} {
			p("**%d caller(s)**\n\n| limiter | p50 | p99 | p50 × PING | p99 × PING | decisions/s | × redis_rate | Redis CPU per decision | × redis_rate | client CPU per decision | commands | round trips |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", c)
			for _, d := range r.decisions {
				if d.callers != c {
					continue
				}
				p("| %s | %.1f µs | %.1f µs | %.2f | %.2f | %.0f | %.2f | %.1f µs | %.2f | %.1f µs | %.1f | %.2f |\n", d.name, us(d.p50), us(d.p99), d.p50Ping, d.p99Ping, d.perSec, d.vsRedisRate, d.cpuUS, d.cpuVsRedisRate, d.clientUS, d.cmds, d.trips)
			}
			p("\n")
		}
		p("Limiters:\n\n")
		for _, k := range decisionKinds() {
			p("- **%s**: %s.\n", k, abouts[k])
		}
		p("- **throttle Transport**: `throttle.New` with a FailFast default rule keyed by a header, `RoundTrip` to a base transport that answers at once: the store call plus the transport's own work.\n")
		p("- **throttle Transport, 2 keys (Also)**: the same with `Rule.Also`, a second key (the app's, shared by every request) reserved in the same script call.\n")
		p("- **throttle Transport, capped in flight (InFlight)**: the same with `Rule.InFlight` (a cap that never binds): the lease rides the reservation; its release, when the body is closed, is the second round trip.\n")
		p("- **throttle Limiter.Allow**: `throttle.NewLimiter` with a FailFast rule, `Allow` on the same keys: the HTTP-less path.\n\n")
	}

	if len(r.growth) > 0 {
		p("## Cost as the log grows\n\n")
		p("One key whose log holds L live entries (spread over the last minute, limit per hour), one caller, %d decisions per repetition. *Full*: the limit is L, every decision is refused and the log stays at L (a saturated key in fail-fast mode). *Admitted*: every decision is admitted and appended (the key of a busy fleet); they come in batches of %d, the entries each batch appended removed after it, so the log holds between L and L + %d. *Script time* is the server's own time in the script call per decision (`INFO commandstats` usec of EVALSHA or EVAL): the cost that a longer log could raise, free of the network and of the suite's own commands; *Redis CPU* as above (in the admitted rows it includes the suite's `INFO` between batches); *bytes per entry* is `MEMORY USAGE` of the key over L.\n\n", r.cfg.growthCalls, growthBatch, growthBatch)
		p("| limiter | log | live entries | p50 | script time per decision | × at 100 | Redis CPU per decision | commands | bytes per entry |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, g := range r.growth {
			base := r.growthOf(g.kind, g.mode, 100)
			p("| %s | %s | %d | %.1f µs | %.2f µs | %.2f | %.1f µs | %.1f | %.1f |\n", g.kind, g.mode, g.size, us(g.p50), g.scriptUS, g.scriptUS/base.scriptUS, g.cpuUS, g.cmds, g.bytesPE)
		}
		p("\n")
	}

	if len(r.memory) > 0 {
		p("## Redis memory per key\n\n5,000 admitted decisions on one key (limit 10⁹ per hour), then `MEMORY USAGE` of every key the limiter wrote. The logs keep one entry per request; the counters keep a number per key (and so cannot say when, within their window, the requests were sent).\n\n| limiter | entries | bytes | bytes per logged request |\n|---|---|---|---|\n")
		for _, m := range r.memory {
			per := "— (a counter)"
			if m.entries > 0 {
				per = fmt.Sprintf("%.1f", float64(m.bytes)/float64(m.entries))
			}
			p("| %s | %d | %d | %s |\n", m.kind, m.entries, m.bytes, per)
		}
		p("\n")
	}

	if len(r.inproc) > 0 {
		p("## In process\n\nOne key, measured with `testing.Benchmark` (benchtime %s, the median of %d repetitions, the cases in turn within each), serially and with `b.RunParallel` on %d cores. *Admitted*: a limit no run reaches; *refused*: one unit per hour, spent before the loop. The RoundTrip rows go through `throttle.New` with the memory store to a base transport that answers at once. The same benchmarks live in the root module: `go test -run '^$' -bench . -benchmem . ./store/`.\n\n| | path | serial ns/op | parallel ns/op | allocs/op | B/op |\n|---|---|---|---|---|---|\n", r.cfg.benchTime, r.cfg.decisionReps, runtime.GOMAXPROCS(0))
		for _, x := range r.inproc {
			if x.parallel {
				continue
			}
			par := r.inprocOf(x.name, x.path, true)
			p("| %s | %s | %.1f | %.1f | %d | %d |\n", x.name, x.path, x.ns, par.ns, x.allocs, x.bytes)
		}
		p("\n")
	}

	if len(r.fleet) > 0 {
		p("## A fleet against a strict upstream\n\n")
		p("%d OS processes (this binary re-executed as workers) of %d goroutines each share the suite's Redis and send `POST /v1/charges` to one strict upstream, throttle's `throttletest/internal/strictapi` in its own process: an exact sliding log of %d per %s on arrival that answers 429 to any excess. Each run lasts %s from a common start. *Saturating*: every goroutine sends as fast as its limiter lets it. *Bursty*: the goroutines send as fast as allowed for the first half of every %s and stay idle for the second. throttle waits for its reserved slot; each peer is used as its users use it: ask, and when refused sleep (its retry-after when it gives one, else %s) and ask again.\n\n", fleetProcs, fleetWorkers, fleetN, fleetW, r.cfg.fleetTime, fleetW, fleetPoll)
		p("*Accepted / optimum*: the requests the upstream accepted over the most a limiter that never causes a 429 could have had accepted, N·ceil(span/W) from the first accepted arrival to the end. *Steady share*: W over the mean time between an accepted arrival and the one N later, the long-run rate as a share of N/W. *Closest pair*: the least time between any arrival (accepted or not) and the N-th after it, minus W: how much of its margin a limiter left unused at its tightest moment; below zero, that window held more than N and the upstream answered 429. *Redis calls per sent request*: the workers' round trips to Redis (a go-redis hook) over the requests they sent; each worker process opens its connections before the start, so connection set-up is not counted. *Wait*: from asking the limiter to sending, per sent request. *Allowance*: throttle only, the median and the largest `Decision.Allowance` of the sent requests: how late after its slot each process measured it may send, recorded in the log with the slot.\n\n")
		p("| load | limiter | 429s | accepted / optimum | steady share | closest pair | Redis calls per sent request | wait p50 | wait p99 | allowance p50 / max |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, f := range r.fleet {
			closest := "— (at most N arrivals)"
			if f.pairs {
				closest = fmt.Sprintf("W %+.2f ms", float64(f.tightest)/float64(time.Millisecond))
			}
			allow := "—"
			if strings.HasPrefix(f.name, "throttle") {
				allow = fmt.Sprintf("%.2f / %.2f ms", float64(f.allowP50)/float64(time.Millisecond), float64(f.allowMax)/float64(time.Millisecond))
			}
			p("| %s | %s | %d | %d / %d (%.1f %%) | %.1f %% | %s | %.3f | %s | %s | %s |\n", f.load, f.name, f.tooMany, f.accepted, f.optimum, 100*f.share(), 100*f.steady, closest, f.callsPerSent, f.waitP50.Round(100*time.Microsecond), f.waitP99.Round(100*time.Microsecond), allow)
		}
		p("\nthrottle's calls beyond one per sent request: ")
		var notes []string
		for _, f := range r.fleet {
			if strings.HasPrefix(f.name, "throttle") {
				notes = append(notes, fmt.Sprintf("%s, %s: %d reservations refused because their slot fell after the end of the run, %d given back when the run ended during their wait, %d slots retaken after a late wake-up (a Cancel and a Reserve each)", f.load, f.name, f.limited, f.canceled, f.retaken))
			}
		}
		p("%s. Transport errors (neither a response nor a refusal) in all runs: %d.\n\n", strings.Join(notes, "; "), func() (n int) {
			for _, f := range r.fleet {
				n += f.errors
			}
			return n
		}())
		if r.svg != "" {
			rel := r.svg
			p("![sends per sliding window over time](%s)\n\n", filepath.ToSlash(rel))
			p("Sends per sliding window of %s over time in the saturating runs: for every 10 ms, the requests that reached the upstream (accepted or answered 429) in the window ending then, against the limit.\n\n", fleetW)
		}
	}
	p("%s", matrixLink)
	return b.String()
}

// matrixLink is the section of BENCHMARKS.md that points to the matrix,
// which has its own page and its own command (-matrix) because it takes
// much longer than the rest.
const matrixLink = "## Against real server-side limiters\n\n" +
	"Fleets of four shapes against seven real server-side limiters of the Go ecosystem (x/time/rate, throttled's GCRA, ulule/limiter's fixed window, a sliding-window counter, an exact sliding log), each configured \"100 per second\", every run started cold, under three configurations of throttle: [docs/matrix.md](docs/matrix.md), generated by `cd bench && go run . -matrix -matrix-out ../docs/matrix.md -matrix-svg ../docs/matrix.svg`.\n\n" +
	"![accepted requests and 429s over time at each upstream, per configuration](docs/matrix.svg)\n"
