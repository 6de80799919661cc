package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/store"
)

// The fleet rows: fleetProcs OS processes (this binary re-executed with
// -worker) of fleetWorkers goroutines each, sharing the suite's Redis, send
// to one strict upstream (throttle's throttletest/internal/strictapi, built and
// run as its own process: an exact sliding log on arrival that answers 429 to
// any excess). throttle waits for its reserved slot; every peer is used as
// its users use it: ask, and when refused sleep (the peer's retry-after when
// it gives one, else fleetPoll) and ask again.

const (
	fleetProcs   = 3
	fleetWorkers = 4
	fleetN       = 200
	fleetW       = time.Second
	fleetPoll    = 10 * time.Millisecond
)

// fleetKinds are the fleet's rows: throttle at its default margin, at the
// 20 ms that was the default before each reservation carried its allowance,
// and at 2 ms (the price of the margin against the headroom it leaves: see
// the closest-pair column), then the peers.
var fleetKinds = []fleetKind{
	{name: fmt.Sprintf("throttle (wait, default margin %d ms)", engine.DefaultMargin/time.Millisecond), kind: kThrottle, margin: 0},
	{name: "throttle (wait, margin 20 ms)", kind: kThrottle, margin: 20 * time.Millisecond},
	{name: "throttle (wait, margin 2 ms)", kind: kThrottle, margin: 2 * time.Millisecond},
	{name: kRedisRate + " + sleep RetryAfter", kind: kRedisRate},
	{name: kRedisRate1 + " + sleep RetryAfter", kind: kRedisRate1},
	{name: kUlule + " + sleep until Reset", kind: kUlule},
	{name: kSeed004 + " + poll 10 ms", kind: kSeed004},
	{name: kSeed000 + " + poll 10 ms", kind: kSeed000},
	{name: kSeed003 + " + poll 10 ms", kind: kSeed003},
}

type fleetKind struct {
	name   string
	kind   string
	margin time.Duration // throttle only; 0: the default Margin
}

// workerConfig is what the parent passes to a worker process (JSON, in
// argument -worker).
type workerConfig struct {
	Kind     string
	Margin   time.Duration
	Redis    string
	URL      string
	N        int
	Per      time.Duration
	Workers  int
	Start    time.Time
	Duration time.Duration
	Bursty   bool // on for Per/2, off for Per/2, in step across processes
	// Limits, if set, are throttle's default rule (WithDefault) instead of
	// a rule of Per(N, Per) for the host: the matrix's configurations.
	Limits        []throttle.Limit
	NoDefaultPace bool // Rule.NoDefaultPace of the matrix's rule
	// SteadyFrom and SteadyTo, if SteadyTo is set, bound the steady
	// state in which calls per request are counted again.
	SteadyFrom, SteadyTo time.Duration
}

// workerResult is what a worker process prints on its standard output.
type workerResult struct {
	Sent, OK, TooMany, Errors int
	Trips                     int64
	// throttle only: slots given back and taken again after a late
	// wake-up (Decision.Retaken), and reservations refused (a slot past
	// the end of the run), each one Redis call more than one per request.
	Retaken, Limited, Canceled int
	// Between SteadyFrom and SteadyTo after the start (when set): the
	// round trips and the requests sent, away from the cold start and
	// the run's end.
	SteadyTrips  int64
	SteadySent   int
	ErrorSample  string    // the first of Errors
	WaitsMs      []float64 // per sent request: from asking to sending
	AllowancesMs []float64 // throttle only, per sent request: Decision.Allowance
	Err          string
}

type waitKey struct{}

// runWorker is the body of a worker process.
func runWorker(arg string) {
	var cfg workerConfig
	res := workerResult{}
	defer func() {
		_ = json.NewEncoder(os.Stdout).Encode(res)
	}()
	if err := json.Unmarshal([]byte(arg), &cfg); err != nil {
		res.Err = err.Error()
		return
	}
	ctx := context.Background()
	var mu sync.Mutex // guards res
	rdb, trips := newClient(cfg.Redis, cfg.Workers+2)
	defer rdb.Close()
	stop := cfg.Start.Add(cfg.Duration)

	hc := &http.Transport{MaxIdleConnsPerHost: cfg.Workers * 2}
	// sendAt records, in the request's context, when the request left for
	// the upstream: for throttle, after its wait inside RoundTrip.
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if p, ok := r.Context().Value(waitKey{}).(*time.Time); ok {
			*p = time.Now()
		}
		return hc.RoundTrip(r)
	})
	var ask func(ctx context.Context) (bool, error) // peers: admitted before stop?
	client := &http.Client{Transport: base}
	if cfg.Kind == kThrottle {
		st, err := store.NewRedis(rdb)
		if err != nil {
			res.Err = err.Error()
			return
		}
		// The suite's upstream keeps an exact sliding log: the window's
		// requests go in bursts (NoDefaultPace), as for the peers.
		rule := throttle.Rule{Host: "127.0.0.1", Limits: []throttle.Limit{throttle.Per(cfg.N, cfg.Per)}, Key: throttle.Fixed("fleet"), NoDefaultPace: true}
		if cfg.Margin > 0 {
			rule.Margin = cfg.Margin
		}
		onDecision := throttle.WithOnDecision(func(d throttle.Decision) {
			mu.Lock()
			defer mu.Unlock()
			res.Retaken += d.Retaken
			switch d.Outcome {
			case throttle.Sent:
				res.AllowancesMs = append(res.AllowancesMs, float64(d.Allowance)/float64(time.Millisecond))
			case throttle.Limited:
				res.Limited++
			case throttle.Canceled:
				res.Canceled++
			}
		})
		ruleOpt := throttle.WithRule(rule)
		if len(cfg.Limits) > 0 {
			ruleOpt = throttle.WithDefault(throttle.Rule{Limits: cfg.Limits, Key: throttle.Fixed("gateway"), NoDefaultPace: cfg.NoDefaultPace})
		}
		tr, err := throttle.New(base, st, ruleOpt, onDecision)
		if err != nil {
			res.Err = err.Error()
			return
		}
		client = &http.Client{Transport: tr}
	} else {
		l, err := newLimiter(ctx, cfg.Kind, rdb, cfg.N, cfg.Per, 0)
		if err != nil {
			res.Err = err.Error()
			return
		}
		ask = func(ctx context.Context) (bool, error) {
			for {
				ok, _, retry, err := l.decide(ctx, "fleet")
				if err != nil || ok {
					return ok, err
				}
				if retry <= 0 {
					retry = fleetPoll
				}
				if time.Now().Add(retry).After(stop) {
					return false, nil
				}
				time.Sleep(retry)
			}
		}
	}
	if err := openConns(ctx, rdb, cfg.Workers+2); err != nil {
		res.Err = err.Error()
		return
	}
	time.Sleep(time.Until(cfg.Start))
	trips0 := trips.n.Load()
	if cfg.SteadyTo > 0 {
		steady := func() (int64, int) {
			mu.Lock()
			defer mu.Unlock()
			return trips.n.Load(), res.Sent
		}
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			time.Sleep(time.Until(cfg.Start.Add(cfg.SteadyFrom)))
			t0, s0 := steady()
			time.Sleep(time.Until(cfg.Start.Add(cfg.SteadyTo)))
			t1, s1 := steady()
			mu.Lock()
			res.SteadyTrips, res.SteadySent = t1-t0, s1-s0
			mu.Unlock()
		}()
	}

	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				now := time.Now()
				if !now.Before(stop) {
					return
				}
				if cfg.Bursty {
					phase := now.Sub(cfg.Start) % cfg.Per
					if phase >= cfg.Per/2 {
						time.Sleep(cfg.Per - phase)
						continue
					}
				}
				sentAt := time.Time{}
				rctx, cancel := context.WithDeadline(context.WithValue(ctx, waitKey{}, &sentAt), stop)
				if ask != nil {
					ok, err := ask(rctx)
					if err != nil || !ok {
						cancel()
						if err != nil && !errors.Is(err, context.DeadlineExceeded) {
							mu.Lock()
							res.Errors++
							mu.Unlock()
						}
						continue
					}
				}
				req, _ := http.NewRequestWithContext(rctx, http.MethodPost, cfg.URL+"/v1/charges", nil)
				resp, err := client.Do(req)
				if resp != nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				cancel()
				// throttle refuses a slot beyond the run's end (the context's
				// deadline): like a queue consumer, retry after RetryAfter.
				var le *throttle.LimitError
				if errors.As(err, &le) {
					if time.Now().Add(le.RetryAfter).After(stop) {
						return
					}
					time.Sleep(le.RetryAfter)
					continue
				}
				mu.Lock()
				if !sentAt.IsZero() {
					res.Sent++
					res.WaitsMs = append(res.WaitsMs, float64(sentAt.Sub(now))/float64(time.Millisecond))
				}
				switch {
				case err == nil && resp.StatusCode == http.StatusTooManyRequests:
					res.TooMany++
				case err == nil:
					res.OK++
				case sentAt.IsZero() && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, throttle.ErrLimited)):
					// the run ended while it waited: not sent
				case errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(stop):
					// sent, and the run ended before its answer came
				default:
					res.Errors++
					if res.ErrorSample == "" && err != nil {
						res.ErrorSample = err.Error()
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	res.Trips = trips.n.Load() - trips0
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// upstreamStats mirrors the JSON of strictapi's GET /_stats.
type upstreamStats struct {
	Total struct {
		Accepted, Rejected int
		RejectedAt         []time.Time
		Arrivals           []time.Time
		FirstAccepted      time.Time
	}
}

type fleetResult struct {
	name, load     string
	tooMany        int
	accepted, sent int
	optimum        int
	steady         float64       // W over the mean gap between an accepted arrival and the one N later
	tightest       time.Duration // the least gap between an arrival and the one N later, minus W
	pairs          bool          // more than N arrivals: tightest is defined
	callsPerSent   float64
	waitP50        time.Duration
	waitP99        time.Duration
	allowP50       time.Duration // throttle only: Decision.Allowance of the sent requests
	allowMax       time.Duration
	errors         int
	retaken        int
	limited        int
	canceled       int
	start, stop    time.Time
	sends          []time.Time // every arrival at the upstream, accepted or not
}

func (fr fleetResult) share() float64 { return float64(fr.accepted) / float64(fr.optimum) }

// startUpstream runs strictapi and returns its URL and a function that stops it.
func startUpstream(bin string, n int, per time.Duration) (string, func(), error) {
	return startServer(exec.Command(bin, "-n", fmt.Sprint(n), "-per", per.String()))
}

// startServer starts cmd, a server that prints its base URL on its first
// line and exits when its standard input is closed, and returns the URL and
// a function that stops it.
func startServer(cmd *exec.Cmd) (string, func(), error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stopFn := func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stopFn()
		return "", nil, fmt.Errorf("%s: %w", filepath.Base(cmd.Path), err)
	}
	return strings.TrimSpace(line), stopFn, nil
}

func (e *env) fleetRun(ctx context.Context, fk fleetKind, bursty bool) (fleetResult, error) {
	load := "saturating"
	if bursty {
		load = "bursty"
	}
	fr := fleetResult{name: fk.name, load: load}
	if err := reset(ctx, e.rdb); err != nil {
		return fr, err
	}
	url, stopUp, err := startUpstream(e.cfg.strictapi, fleetN, fleetW)
	if err != nil {
		return fr, err
	}
	defer stopUp()
	self, err := os.Executable()
	if err != nil {
		return fr, err
	}
	cfg := workerConfig{Kind: fk.kind, Margin: fk.margin, Redis: e.srv.addr, URL: url, N: fleetN, Per: fleetW,
		Workers: fleetWorkers, Start: time.Now().Add(500 * time.Millisecond), Duration: e.cfg.fleetTime, Bursty: bursty}
	outs, err := runWorkers(self, fleetProcs, cfg)
	if err != nil {
		return fr, err
	}
	var waits, allows []float64
	var trips int64
	for _, o := range outs {
		fr.sent += o.Sent
		fr.errors += o.Errors
		fr.retaken += o.Retaken
		fr.limited += o.Limited
		fr.canceled += o.Canceled
		trips += o.Trips
		waits = append(waits, o.WaitsMs...)
		allows = append(allows, o.AllowancesMs...)
	}
	resp, err := http.Get(url + "/_stats")
	if err != nil {
		return fr, err
	}
	var st upstreamStats
	err = json.NewDecoder(resp.Body).Decode(&st)
	_ = resp.Body.Close()
	if err != nil {
		return fr, err
	}
	fr.start, fr.stop = cfg.Start, cfg.Start.Add(cfg.Duration)
	fr.tooMany, fr.accepted = st.Total.Rejected, st.Total.Accepted
	fr.sends = append(slices.Clone(st.Total.Arrivals), st.Total.RejectedAt...)
	slices.SortFunc(fr.sends, func(a, b time.Time) int { return a.Compare(b) })
	if !st.Total.FirstAccepted.IsZero() {
		span := fr.stop.Sub(st.Total.FirstAccepted)
		fr.optimum = fleetN * int(math.Ceil(span.Seconds()/fleetW.Seconds()))
	}
	if a := st.Total.Arrivals; len(a) > fleetN {
		var sum time.Duration
		for i := fleetN; i < len(a); i++ {
			sum += a[i].Sub(a[i-fleetN])
		}
		fr.steady = fleetW.Seconds() / (sum.Seconds() / float64(len(a)-fleetN))
	}
	if a := fr.sends; len(a) > fleetN {
		fr.pairs = true
		fr.tightest = a[fleetN].Sub(a[0]) - fleetW
		for i := fleetN; i < len(a); i++ {
			fr.tightest = min(fr.tightest, a[i].Sub(a[i-fleetN])-fleetW)
		}
	}
	if fr.sent > 0 {
		fr.callsPerSent = float64(trips) / float64(fr.sent)
	}
	slices.Sort(waits)
	if len(waits) > 0 {
		fr.waitP50 = time.Duration(waits[len(waits)/2] * float64(time.Millisecond))
		fr.waitP99 = time.Duration(waits[min(len(waits)-1, len(waits)*99/100)] * float64(time.Millisecond))
	}
	slices.Sort(allows)
	if len(allows) > 0 {
		fr.allowP50 = time.Duration(allows[len(allows)/2] * float64(time.Millisecond))
		fr.allowMax = time.Duration(allows[len(allows)-1] * float64(time.Millisecond))
	}
	return fr, nil
}

func (e *env) fleet(ctx context.Context, progress func(string)) ([]fleetResult, error) {
	if only := os.Getenv("BENCH_FLEET_ONLY"); only != "" { // debugging: one row
		var keep []fleetKind
		for _, fk := range fleetKinds {
			if strings.Contains(fk.name, only) {
				keep = append(keep, fk)
			}
		}
		fleetKinds = keep
	}
	var out []fleetResult
	for _, bursty := range []bool{false, true} {
		for _, fk := range fleetKinds {
			fr, err := e.fleetRun(ctx, fk, bursty)
			if err != nil {
				return nil, fmt.Errorf("fleet %s: %w", fk.name, err)
			}
			progress(fmt.Sprintf("fleet %-10s %-45s 429s %4d accepted %4d/%4d (%.1f%%) steady %.1f%% tightest %v calls/sent %.3f wait p50 %v p99 %v errors %d sent %d limited %d canceled %d retaken %d allowance p50 %v max %v",
				fr.load, fr.name, fr.tooMany, fr.accepted, fr.optimum, 100*fr.share(), 100*fr.steady, fr.tightest.Round(10*time.Microsecond), fr.callsPerSent, fr.waitP50.Round(time.Millisecond), fr.waitP99.Round(time.Millisecond), fr.errors, fr.sent, fr.limited, fr.canceled, fr.retaken, fr.allowP50.Round(10*time.Microsecond), fr.allowMax.Round(10*time.Microsecond)))
			out = append(out, fr)
		}
	}
	return out, nil
}

// runWorkers runs procs worker processes (self re-executed with -worker)
// of configuration cfg and returns their results.
func runWorkers(self string, procs int, cfg workerConfig) ([]workerResult, error) {
	arg, _ := json.Marshal(cfg)
	outs := make([]workerResult, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(self, "-worker", string(arg))
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			cmd.Stderr = os.Stderr
			b, err := cmd.Output()
			if err == nil {
				err = json.Unmarshal(b, &outs[p])
			}
			if err == nil && outs[p].Err != "" {
				err = errors.New(outs[p].Err)
			}
			if err != nil {
				errs[p] = fmt.Errorf("worker: %w", err)
			}
		}()
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}

// buildStrictAPI builds throttle's strict upstream into dir.
func buildStrictAPI(dir string) (string, error) {
	bin := filepath.Join(dir, "strictapi")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/throttle-go/throttle/throttletest/internal/strictapi")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build strictapi: %v\n%s", err, b)
	}
	return bin, nil
}
