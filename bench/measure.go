package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// env is what every measurement shares: the server, one client with a round
// trip counter, and the run's settings.
type env struct {
	srv   *server
	rdb   *redis.Client
	trips *tripCounter
	cfg   config
}

// sample is one measured run of one operation.
type sample struct {
	lat      []time.Duration // per call, sorted
	n        int             // calls
	elapsed  time.Duration
	cpu      float64 // Redis CPU seconds during the run
	client   float64 // this process's CPU seconds during the run (getrusage)
	commands int64   // Redis commands, those inside scripts and transactions included
	scriptUS int64   // INFO commandstats microseconds of EVAL and EVALSHA
	trips    int64   // client round trips
}

func (s sample) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	return s.lat[min(len(s.lat)-1, int(p*float64(len(s.lat))))]
}
func (s sample) perSec() float64        { return float64(s.n) / s.elapsed.Seconds() }
func (s sample) cpuPerCall() float64    { return s.cpu / float64(s.n) * 1e6 } // µs
func (s sample) cmdsPerCall() float64   { return float64(s.commands) / float64(s.n) }
func (s sample) clientPerCall() float64 { return s.client / float64(s.n) * 1e6 }      // µs
func (s sample) scriptPerCall() float64 { return float64(s.scriptUS) / float64(s.n) } // µs
func (s sample) tripsPerCall() float64  { return float64(s.trips) / float64(s.n) }

// run calls op from c goroutines until d has passed (or each has made
// maxCalls calls, if positive), after a warm-up, and measures it. op gets the
// goroutine's index and its call number.
func (e *env) run(ctx context.Context, c int, d time.Duration, maxCalls int, op func(ctx context.Context, g, i int) error) (sample, error) {
	return e.runWarm(ctx, c, d, maxCalls, 20, op)
}

// runWarm is run with warm calls per goroutine first.
func (e *env) runWarm(ctx context.Context, c int, d time.Duration, maxCalls, warm int, op func(ctx context.Context, g, i int) error) (sample, error) {
	// Warm-up: connections, script caches, the branch predictor.
	if err := openConns(ctx, e.rdb, c); err != nil {
		return sample{}, err
	}
	for g := range c {
		for i := range warm {
			if err := op(ctx, g, -1-i); err != nil {
				return sample{}, fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	a, err := takeSnapshot(ctx, e.rdb)
	if err != nil {
		return sample{}, err
	}
	trips0 := e.trips.n.Load()
	client0 := selfCPU()
	lats := make([][]time.Duration, c)
	errs := make([]error, c)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for g := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := make([]time.Duration, 0, 4096)
			for i := 0; maxCalls <= 0 || i < maxCalls; i++ {
				t0 := time.Now()
				if err := op(ctx, g, i); err != nil {
					errs[g] = err
					return
				}
				t1 := time.Now()
				l = append(l, t1.Sub(t0))
				if maxCalls <= 0 && t1.After(deadline) {
					break
				}
			}
			lats[g] = l
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	client := selfCPU() - client0
	trips := e.trips.n.Load() - trips0
	b, err := takeSnapshot(ctx, e.rdb)
	if err != nil {
		return sample{}, err
	}
	for _, err := range errs {
		if err != nil {
			return sample{}, err
		}
	}
	s := sample{elapsed: elapsed, cpu: b.cpu - a.cpu, commands: commandsSince(a, b), trips: trips, client: client,
		scriptUS: b.usec["evalsha"] - a.usec["evalsha"] + b.usec["eval"] - a.usec["eval"]}
	for _, l := range lats {
		s.lat = append(s.lat, l...)
	}
	slices.Sort(s.lat)
	s.n = len(s.lat)
	return s, nil
}

// decisionKeys are the rate keys the decision rows spread their calls over:
// many keys, each with a short log, so that these rows measure a decision
// and not a log's size (the growth rows do that).
const decisionKeys = 1000

// decisionLimit admits every call of the decision rows: 1,000,000 per second
// per key.
var decisionLimit = contract.Limit{N: 1_000_000, Per: time.Second}

type decisionOp struct {
	name string
	op   func(ctx context.Context, g, i int) error
}

// decisionOps returns PING and one decision per limiter, throttle's
// Transport included (a RoundTrip to a base that answers at once).
func (e *env) decisionOps(ctx context.Context) ([]decisionOp, error) {
	keys := make([]string, decisionKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:%d", i)
	}
	pick := func(g, i int) string { return keys[(g*7919+i+decisionKeys)%decisionKeys] }
	ops := []decisionOp{{"PING", func(ctx context.Context, _, _ int) error { return e.rdb.Ping(ctx).Err() }}}
	for _, kind := range decisionKinds() {
		l, err := newLimiter(ctx, kind, e.rdb, decisionLimit.N, decisionLimit.Per, 0)
		if err != nil {
			return nil, err
		}
		ops = append(ops, decisionOp{kind, func(ctx context.Context, g, i int) error {
			ok, _, _, err := l.decide(ctx, pick(g, i))
			if err == nil && !ok {
				err = fmt.Errorf("%s refused a decision that its limit admits", kind)
			}
			return err
		}})
	}
	st, err := store.NewRedis(e.rdb)
	if err != nil {
		return nil, err
	}
	tr, err := throttle.New(okTransport{}, st, throttle.WithDefault(throttle.Rule{
		Limits:   []throttle.Limit{throttle.Limit(decisionLimit)},
		Key:      func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil },
		FailFast: true,
	}))
	if err != nil {
		return nil, err
	}
	reqs := make([]*http.Request, decisionKeys)
	for i := range reqs {
		reqs[i], _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example/v1/x", nil)
		reqs[i].Header.Set("X-Key", keys[i])
	}
	roundTrip := func(tr *throttle.Transport) func(context.Context, int, int) error {
		return func(_ context.Context, g, i int) error {
			resp, err := tr.RoundTrip(reqs[(g*7919+i+decisionKeys)%decisionKeys])
			if err != nil {
				return err
			}
			return resp.Body.Close()
		}
	}
	ops = append(ops, decisionOp{"throttle Transport", roundTrip(tr)})

	// What each capability costs on the same path: a second key reserved
	// in the same call (Rule.Also), a cap in flight (Rule.InFlight: the
	// lease rides the reservation, its release is one more call when the
	// body is closed), and the Limiter without HTTP.
	also, err := throttle.New(okTransport{}, st, throttle.WithDefault(throttle.Rule{
		Name: "also", Limits: []throttle.Limit{throttle.Limit(decisionLimit)}, FailFast: true,
		Key: func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil },
		Also: []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("app"),
			Limits: []throttle.Limit{{N: decisionLimit.N * decisionKeys, Per: decisionLimit.Per}}}},
	}))
	if err != nil {
		return nil, err
	}
	capped, err := throttle.New(okTransport{}, st, throttle.WithDefault(throttle.Rule{
		Name: "capped", Limits: []throttle.Limit{throttle.Limit(decisionLimit)}, FailFast: true, InFlight: 1 << 20,
		Key: func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil },
	}))
	if err != nil {
		return nil, err
	}
	lim, err := throttle.NewLimiter(st, throttle.Rule{Name: "limiter", Limits: []throttle.Limit{throttle.Limit(decisionLimit)}, FailFast: true})
	if err != nil {
		return nil, err
	}
	ops = append(ops,
		decisionOp{"throttle Transport, 2 keys (Also)", roundTrip(also)},
		decisionOp{"throttle Transport, capped in flight (InFlight)", roundTrip(capped)},
		decisionOp{"throttle Limiter.Allow", func(ctx context.Context, g, i int) error {
			ok, err := lim.Allow(ctx, pick(g, i), 1)
			if err == nil && !ok {
				err = errors.New("throttle Limiter refused a decision that its limit admits")
			}
			return err
		}})
	return ops, nil
}

// okTransport answers every request at once with 200.
type okTransport struct{}

func (okTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}, nil
}

// decisionResult is the medians, over the repetitions, of one operation at
// one concurrency.
type decisionResult struct {
	name             string
	callers          int
	p50, p99         time.Duration
	p50Ping, p99Ping float64 // ratios to PING's in the same repetition
	perSec           float64
	cpuUS            float64
	clientUS         float64
	cmds, trips      float64
	vsRedisRate      float64 // decisions per second / redis_rate's, same repetition
	cpuVsRedisRate   float64
}

func (e *env) decisions(ctx context.Context, progress func(string)) ([]decisionResult, error) {
	ops, err := e.decisionOps(ctx)
	if err != nil {
		return nil, err
	}
	type key struct {
		name string
		c    int
	}
	all := map[key][]sample{}
	ratios := map[key][][4]float64{}
	for rep := range e.cfg.decisionReps {
		for _, c := range []int{1, 32} {
			got := map[string]sample{}
			for _, o := range ops {
				if err := reset(ctx, e.rdb); err != nil {
					return nil, err
				}
				s, err := e.run(ctx, c, e.cfg.decisionTime, 0, o.op)
				if err != nil {
					return nil, fmt.Errorf("%s at %d callers: %w", o.name, c, err)
				}
				got[o.name] = s
			}
			if c == 1 {
				// One caller's latency depends on how deeply the cores
				// sleep between calls, which drifts over a run: a row
				// measured a few seconds apart from PING's meets another
				// machine. The latencies come from a pass that calls the
				// limiters in turn, one call each, so that every one
				// meets the same state; the other columns from the rows.
				lats, err := e.interleaved(ctx, ops, 2*e.cfg.decisionTime)
				if err != nil {
					return nil, err
				}
				for _, o := range ops {
					s := got[o.name]
					s.lat = lats[o.name]
					got[o.name] = s
				}
			}
			for _, o := range ops {
				s := got[o.name]
				all[key{o.name, c}] = append(all[key{o.name, c}], s)
				progress(fmt.Sprintf("decisions rep %d/%d, %2d callers: %-28s p50 %6.1fµs  %7.0f/s  cpu %5.1fµs", rep+1, e.cfg.decisionReps, c, o.name, us(s.pct(.5)), s.perSec(), s.cpuPerCall()))
			}
			ping, rr := got["PING"], got[kRedisRate]
			for _, o := range ops {
				s := got[o.name]
				ratios[key{o.name, c}] = append(ratios[key{o.name, c}], [4]float64{
					float64(s.pct(.5)) / float64(ping.pct(.5)),
					float64(s.pct(.99)) / float64(ping.pct(.99)),
					s.perSec() / rr.perSec(),
					s.cpuPerCall() / rr.cpuPerCall(),
				})
			}
		}
	}
	var out []decisionResult
	for _, c := range []int{1, 32} {
		for _, o := range ops {
			ss, rs := all[key{o.name, c}], ratios[key{o.name, c}]
			r := decisionResult{name: o.name, callers: c}
			r.p50 = time.Duration(median(ss, func(s sample) float64 { return float64(s.pct(.5)) }))
			r.p99 = time.Duration(median(ss, func(s sample) float64 { return float64(s.pct(.99)) }))
			r.perSec = median(ss, sample.perSec)
			r.cpuUS = median(ss, sample.cpuPerCall)
			r.clientUS = median(ss, sample.clientPerCall)
			r.cmds = median(ss, sample.cmdsPerCall)
			r.trips = median(ss, sample.tripsPerCall)
			r.p50Ping = median(rs, func(v [4]float64) float64 { return v[0] })
			r.p99Ping = median(rs, func(v [4]float64) float64 { return v[1] })
			r.vsRedisRate = median(rs, func(v [4]float64) float64 { return v[2] })
			r.cpuVsRedisRate = median(rs, func(v [4]float64) float64 { return v[3] })
			out = append(out, r)
		}
	}
	return out, nil
}

// interleaved calls ops in turn, one call each per round (each round
// starting one op further on), from one goroutine, for d in all (after a warm-up of each), and returns each op's
// latencies, sorted.
func (e *env) interleaved(ctx context.Context, ops []decisionOp, d time.Duration) (map[string][]time.Duration, error) {
	for _, o := range ops {
		for i := range 20 {
			if err := o.op(ctx, 0, -1-i); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", o.name, err)
			}
		}
	}
	lats := make([][]time.Duration, len(ops))
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		for k := range ops {
			// Each round starts one op further on: no op always follows
			// the same other.
			j := (i + k) % len(ops)
			o := ops[j]
			t0 := time.Now()
			if err := o.op(ctx, 0, i); err != nil {
				return nil, fmt.Errorf("%s: %w", o.name, err)
			}
			lats[j] = append(lats[j], time.Since(t0))
		}
	}
	out := make(map[string][]time.Duration, len(ops))
	for j, o := range ops {
		slices.Sort(lats[j])
		out[o.name] = lats[j]
	}
	return out, nil
}

// add merges two samples of the same operation.
func (s sample) add(t sample) sample {
	s.lat = append(s.lat, t.lat...)
	slices.Sort(s.lat)
	s.n += t.n
	s.elapsed += t.elapsed
	s.cpu += t.cpu
	s.client += t.client
	s.commands += t.commands
	s.scriptUS += t.scriptUS
	s.trips += t.trips
	return s
}

func median[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// selfCPU is the CPU time of this process so far, user and system, in
// seconds: the client's side of a row, warm-up excluded.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
