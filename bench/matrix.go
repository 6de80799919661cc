package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
)

// The matrix: each upstream of gatewayKinds, limited "100 per second" by a
// real server-side limiter in its own process, against fleets of several
// shapes (OS processes × goroutines, this binary re-executed as workers
// sharing the suite's Redis), each run started cold (a fresh gateway, fresh
// worker processes, a flushed Redis), under each configuration of throttle.

// shape is a fleet: procs OS processes of workers goroutines each.
type shape struct{ procs, workers int }

func (s shape) String() string { return fmt.Sprintf("%d×%d", s.procs, s.workers) }

var matrixShapes = []shape{{1, 1}, {4, 1}, {2, 16}, {3, 4}}

func parseShape(s string) (shape, error) {
	a, b, ok := strings.Cut(strings.ReplaceAll(s, "×", "x"), "x")
	p, err1 := strconv.Atoi(a)
	w, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || p < 1 || w < 1 {
		return shape{}, fmt.Errorf("bad fleet shape %q (want PROCSxWORKERS, such as 3x4)", s)
	}
	return shape{p, w}, nil
}

// A matrixConfig is a configuration of throttle a user could write for the
// gateway.
type matrixConfig struct {
	id, about string
	limits    func(g gatewayKind) []throttle.Limit
	bursts    func(g gatewayKind) bool // Rule.NoDefaultPace
	// target says what throttle aims for with this configuration (empty: none,
	// a reference).
	target string
}

func always(gatewayKind) bool { return true }
func never(gatewayKind) bool  { return false }

var matrixConfigs = []matrixConfig{
	{id: "bursts", about: "`PerSecond(100)` with `NoDefaultPace: true`: the window limit alone, each window's requests sent as early as it allows (the sliding log)",
		limits: func(gatewayKind) []throttle.Limit { return []throttle.Limit{throttle.PerSecond(gatewayN)} }, bursts: always},
	{id: "matching", about: "the algorithm that matches the upstream: `PerSecond(100)` with `NoDefaultPace: true` (the log alone) against the sliding log and the fixed window; `Paced(100, time.Second, b)` with the bucket's burst (capacity − 1) against buckets and GCRA; `PerSecond(100)` in the default shape (the window limit, and a pace beside it) against the sliding-window counter, which counts a window but weighs the last one as if its requests were spread evenly (docs/pacing.md)",
		target: "matching",
		limits: func(g gatewayKind) []throttle.Limit {
			if g.log || g.shaped {
				return []throttle.Limit{throttle.PerSecond(gatewayN)}
			}
			return []throttle.Limit{throttle.Paced(gatewayN, gatewayPer, g.burst)}
		},
		bursts: func(g gatewayKind) bool { return g.log }},
	{id: "default", about: "`PerSecond(100)`: the default shape for an upstream of unknown shape, the window limit and a pace of its rate with a burst of 9, earned (`SlowStart`), on one rule",
		target: "default",
		limits: func(gatewayKind) []throttle.Limit { return []throttle.Limit{throttle.PerSecond(gatewayN)} }, bursts: never},
}

// matrixRun is one cold run of one cell.
type matrixRun struct {
	dur      time.Duration   // from the fleet's start to its stop
	accepted []time.Duration // arrivals answered 200, from the start
	rejected []time.Duration // arrivals answered 429, from the start
	sent     int             // requests the workers sent
	trips    int64           // their round trips to Redis
	// steadySent and steadyTrips are the same from 1 s after the start to
	// steadyEnd before the stop.
	steadySent  int
	steadyTrips int64
	errors      int
	errorSample string
	retaken     int       // slots the workers gave back (Decision.Retaken)
	allowances  []float64 // Decision.Allowance of the sent requests, in ms, sorted
}

// details is what -matrix-verbose prints of a run besides its line: when
// each 429 came, the accepted arrivals around those after 2 s, and the
// allowances the workers reserved with.
func (r matrixRun) details() []string {
	var ms []string
	for _, t := range r.rejected {
		ms = append(ms, fmt.Sprintf("%.0f", float64(t)/1e6))
	}
	out := []string{"  429s at ms: " + strings.Join(ms, " ")}
	for _, t := range r.rejected {
		if t < 2*time.Second {
			continue
		}
		var near []string
		for _, a := range r.accepted {
			if a > t-60*time.Millisecond && a < t+30*time.Millisecond {
				near = append(near, fmt.Sprintf("%.2f", float64(a-t)/1e6))
			}
		}
		out = append(out, fmt.Sprintf("    accepted around the 429 at %.0f ms (ms from it): %s", float64(t)/1e6, strings.Join(near, " ")))
	}
	if a := r.allowances; len(a) > 0 {
		q := func(f float64) float64 { return a[int(f*float64(len(a)-1))] }
		out = append(out, fmt.Sprintf("  allowance ms p10 %.3f p50 %.3f p90 %.3f p99 %.3f max %.3f; slots given back %d", q(.1), q(.5), q(.9), q(.99), q(1), r.retaken))
	}
	return out
}

// tooManyAfter counts the 429s that arrived at or after d from the start.
func (r matrixRun) tooManyAfter(d time.Duration) int {
	n := 0
	for _, t := range r.rejected {
		if t >= d {
			n++
		}
	}
	return n
}

// shareAfter is the accepted arrivals from d after the start to the stop
// over what the upstream sustains in that time (gatewayN per gatewayPer).
func (r matrixRun) shareAfter(d time.Duration) float64 {
	if r.dur <= d {
		return 0
	}
	n := 0
	for _, t := range r.accepted {
		if t >= d && t < r.dur {
			n++
		}
	}
	return float64(n) / (float64(gatewayN) * (r.dur - d).Seconds() / gatewayPer.Seconds())
}

// steadyEnd is how long before the stop the steady state ends: the last
// reservations of a run are refused (their slot is past its end) or given
// back, a call each, which a fleet that keeps running does not pay.
const steadyEnd = 500 * time.Millisecond

// callsPerSent is the Redis calls per sent request in the steady state.
// steadyRate is the long-run rate of the accepted arrivals from d after the
// start on, as a share of what the upstream sustains: gatewayPer over the
// mean time between an arrival and the gatewayN-th after it (0 with too few
// arrivals). Unlike shareAfter it does not depend on where a burst falls.
func (r matrixRun) steadyRate(d time.Duration) float64 {
	i := slices.IndexFunc(r.accepted, func(t time.Duration) bool { return t >= d })
	j := slices.IndexFunc(r.accepted, func(t time.Duration) bool { return t >= r.dur })
	if j < 0 {
		j = len(r.accepted)
	}
	if i < 0 || j-i <= gatewayN {
		return 0
	}
	a := r.accepted[i:j]
	var sum time.Duration
	for j := gatewayN; j < len(a); j++ {
		sum += a[j] - a[j-gatewayN]
	}
	return gatewayPer.Seconds() / (sum.Seconds() / float64(len(a)-gatewayN))
}

func (r matrixRun) callsPerSent() float64 {
	if r.steadySent == 0 {
		return 0
	}
	return float64(r.steadyTrips) / float64(r.steadySent)
}

// matrixCell is the runs of one upstream, shape and configuration.
type matrixCell struct {
	up   gatewayKind
	sh   shape
	conf matrixConfig
	runs []matrixRun
}

// cellStats is what the table reports of a cell.
type cellStats struct {
	runs, runsWith429, tooMany, late int     // late: 429s from 2 s after the start on
	shareMin, shareMed               float64 // share of the sustainable rate after the first second
	steadyMed                        float64 // the median steadyRate after the first second
	callsMed, callsMax               float64 // Redis calls per sent request
	errors                           int
}

func (c matrixCell) stats() cellStats {
	s := cellStats{runs: len(c.runs)}
	var shares, calls, steady []float64
	for _, r := range c.runs {
		if len(r.rejected) > 0 {
			s.runsWith429++
		}
		s.tooMany += len(r.rejected)
		s.late += r.tooManyAfter(2 * time.Second)
		s.errors += r.errors
		shares = append(shares, r.shareAfter(time.Second))
		steady = append(steady, r.steadyRate(time.Second))
		calls = append(calls, r.callsPerSent())
	}
	if len(shares) > 0 {
		s.shareMin = slices.Min(shares)
		s.callsMax = slices.Max(calls)
	}
	id := func(f float64) float64 { return f }
	s.shareMed, s.callsMed, s.steadyMed = median(shares, id), median(calls, id), median(steady, id)
	return s
}

// verdict judges a cell against throttle's targets, as the project states
// them: no 429 (or none after 2 s) in any run, and the medians of the runs'
// share and calls per request: "" when its configuration has none.
func (c matrixCell) verdict() (string, bool) {
	s := c.stats()
	switch c.conf.target {
	case "matching":
		ok := s.tooMany == 0 && s.shareMed >= 0.99 && s.callsMed <= 1.03
		return "0 × 429; medians ≥ 99 %, ≤ 1.03 calls", ok
	case "default":
		if c.up.strict {
			ok := s.late == 0 && s.shareMed >= 0.95 && s.callsMed <= 1.03
			return "no 429 after 2 s; medians ≥ 95 %, ≤ 1.03 calls", ok
		}
		ok := s.tooMany == 0 && s.shareMed >= 0.95 && s.callsMed <= 1.03
		return "0 × 429; medians ≥ 95 %, ≤ 1.03 calls", ok
	}
	return "", false
}

// matrixOptions selects the matrix's cells and their runs.
type matrixOptions struct {
	runs      int
	dur       time.Duration
	upstreams []gatewayKind
	shapes    []shape
	configs   []matrixConfig
	verbose   bool // print each run's details (matrixRun.details)
}

func selectMatrix(runs int, dur time.Duration, ups, shapes, configs string) (matrixOptions, error) {
	o := matrixOptions{runs: runs, dur: dur}
	if runs < 1 || dur < 2*time.Second {
		return o, fmt.Errorf("-matrix-runs must be at least 1 and -matrix-time at least 2s")
	}
	for _, id := range strings.Split(ups, ",") {
		if id == "all" {
			o.upstreams = gatewayKinds
			continue
		}
		g, ok := gatewayByID(id)
		if !ok {
			return o, fmt.Errorf("unknown upstream %q (want all or some of %s)", id, strings.Join(gatewayIDs(), ","))
		}
		o.upstreams = append(o.upstreams, g)
	}
	for _, s := range strings.Split(shapes, ",") {
		if s == "all" {
			o.shapes = matrixShapes
			continue
		}
		sh, err := parseShape(s)
		if err != nil {
			return o, err
		}
		o.shapes = append(o.shapes, sh)
	}
	for _, id := range strings.Split(configs, ",") {
		i := slices.IndexFunc(matrixConfigs, func(c matrixConfig) bool { return c.id == id || id == "all" })
		if i < 0 {
			return o, fmt.Errorf("unknown configuration %q (want all or some of bursts,matching,default)", id)
		}
		if id == "all" {
			o.configs = matrixConfigs
			continue
		}
		o.configs = append(o.configs, matrixConfigs[i])
	}
	return o, nil
}

func gatewayIDs() []string {
	var ids []string
	for _, g := range gatewayKinds {
		ids = append(ids, g.id)
	}
	return ids
}

// matrix runs every selected cell, the runs of a cell after one another
// and the cells in turn within each round of runs (so that a spell of other
// work on the machine hits few runs of any one cell).
func (e *env) matrix(ctx context.Context, o matrixOptions, progress func(string)) ([]matrixCell, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var cells []matrixCell
	for _, up := range o.upstreams {
		for _, sh := range o.shapes {
			for _, conf := range o.configs {
				cells = append(cells, matrixCell{up: up, sh: sh, conf: conf})
			}
		}
	}
	for i := range o.runs {
		for ci := range cells {
			c := &cells[ci]
			r, err := e.matrixRun(ctx, self, c.up, c.sh, c.conf, o.dur)
			if err != nil {
				return nil, fmt.Errorf("matrix %s %s %s: %w", c.up.id, c.sh, c.conf.id, err)
			}
			c.runs = append(c.runs, r)
			if o.verbose {
				for _, line := range r.details() {
					progress(line)
				}
			}
			progress(fmt.Sprintf("matrix run %d/%d %-14s %-5s %-9s 429s %3d (after 2 s %3d) share after 1 s %5.1f %% steady %5.1f %% calls/sent %.3f sent %d errors %d %s",
				i+1, o.runs, c.up.id, c.sh, c.conf.id, len(r.rejected), r.tooManyAfter(2*time.Second), 100*r.shareAfter(time.Second), 100*r.steadyRate(time.Second), r.callsPerSent(), r.sent, r.errors, r.errorSample))
		}
	}
	return cells, nil
}

func (e *env) matrixRun(ctx context.Context, self string, up gatewayKind, sh shape, conf matrixConfig, dur time.Duration) (matrixRun, error) {
	var r matrixRun
	if err := reset(ctx, e.rdb); err != nil {
		return r, err
	}
	url, stop, err := startServer(exec.Command(self, "-gateway", up.id))
	if err != nil {
		return r, err
	}
	defer stop()
	start := time.Now().Add(time.Second) // time for the workers to start and connect
	cfg := workerConfig{Kind: kThrottle, Redis: e.srv.addr, URL: url, N: gatewayN, Per: gatewayPer,
		Workers: sh.workers, Start: start, Duration: dur, Limits: conf.limits(up), NoDefaultPace: conf.bursts(up),
		SteadyFrom: time.Second, SteadyTo: dur - steadyEnd}
	outs, err := runWorkers(self, sh.procs, cfg)
	if err != nil {
		return r, err
	}
	for _, o := range outs {
		r.retaken += o.Retaken
		r.allowances = append(r.allowances, o.AllowancesMs...)
		r.sent += o.Sent
		r.trips += o.Trips
		r.steadySent += o.SteadySent
		r.steadyTrips += o.SteadyTrips
		r.errors += o.Errors
		if r.errorSample == "" {
			r.errorSample = o.ErrorSample
		}
	}
	resp, err := http.Get(url + "/_stats")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	var got arrivals
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return r, err
	}
	slices.Sort(r.allowances)
	r.dur = dur
	r.accepted, r.rejected = offsets(got.Accepted, start), offsets(got.Rejected, start)
	return r, nil
}

// offsets returns the Unix nanosecond times ns as durations from start,
// in order.
func offsets(ns []int64, start time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(ns))
	for _, t := range ns {
		out = append(out, time.Unix(0, t).Sub(start))
	}
	slices.Sort(out)
	return out
}
