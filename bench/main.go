// Command bench measures throttle beside the Redis rate limiters its users
// would otherwise pick, in one run on one redis-server, and writes
// BENCHMARKS.md and a picture of a fleet run.
//
//	cd bench && go run . -out ../BENCHMARKS.md -svg ../docs/fleet.svg
//	cd bench && go run . -quick            # a fast smoke run, to stdout
//	cd bench && go run . -matrix -matrix-out ../docs/matrix.md -matrix-svg ../docs/matrix.svg
//
// -matrix runs only the matrix against real server-side limiters (see
// matrix.go), which has its own page.
//
// It starts its own redis-server (from PATH) on a free loopback port with
// persistence off, and stops it at the end, on SIGINT/SIGTERM and on a panic.
// Every row is measured several times (medians are reported) and every
// comparison is a ratio taken within one run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type config struct {
	reps         int // repetitions of the growth and in-process rows
	decisionReps int // repetitions of the decision rows: short, so many
	decisionTime time.Duration
	growthCalls  int
	fleetTime    time.Duration
	benchTime    string
	strictapi    string
	quick        bool
	command      string
}

func main() {
	testing.Init() // testing.Benchmark reads -test.benchtime
	out := flag.String("out", "", "write the report to this file (default: standard output)")
	svg := flag.String("svg", "", "write the fleet picture (SVG) to this file")
	quick := flag.Bool("quick", false, "a fast smoke run: one repetition, short runs (figures are rough)")
	worker := flag.String("worker", "", "internal: run as a fleet worker with this JSON configuration")
	only := flag.String("only", "", "internal/debugging: run one section: decisions, growth, memory, inproc or fleet")
	gateway := flag.String("gateway", "", "internal: run as the matrix's upstream gateway of this kind")
	matrix := flag.Bool("matrix", false, "run only the matrix against real server-side limiters (its own page)")
	mRuns := flag.Int("matrix-runs", 10, "-matrix: cold runs per cell")
	mTime := flag.Duration("matrix-time", 5*time.Second, "-matrix: the length of a run")
	mUps := flag.String("matrix-upstreams", "all", "-matrix: the upstreams, comma-separated: all or some of "+strings.Join(gatewayIDs(), ","))
	mShapes := flag.String("matrix-shapes", "all", "-matrix: the fleet shapes (processes x workers), comma-separated: all or some such as 1x1,4x1,2x16,3x4")
	mConfigs := flag.String("matrix-configs", "all", "-matrix: throttle's configurations, comma-separated: all or some of bursts,matching,default")
	mOut := flag.String("matrix-out", "", "-matrix: write the matrix's page to this file (default: standard output)")
	mSVG := flag.String("matrix-svg", "", "-matrix: write the matrix's figure (SVG) to this file")
	mVerbose := flag.Bool("matrix-verbose", false, "-matrix: print each run's 429 times, the arrivals around late ones and the allowances")
	mSmall := flag.String("matrix-small-svg", "", "-matrix: write a small figure (a few upstreams, bursts beside default) to this file, for the README")
	flag.Parse()
	if *worker != "" {
		runWorker(*worker)
		return
	}
	if *gateway != "" {
		runGateway(*gateway)
		return
	}
	if *matrix {
		o, err := selectMatrix(*mRuns, *mTime, *mUps, *mShapes, *mConfigs)
		o.verbose = *mVerbose
		if err == nil {
			err = runMatrix(o, matrixCommand(), *mOut, *mSVG, *mSmall)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	cfg := config{reps: 3, decisionReps: 5, decisionTime: 600 * time.Millisecond, growthCalls: 5000, fleetTime: 4500 * time.Millisecond, benchTime: "500ms"}
	if *quick {
		cfg = config{reps: 1, decisionReps: 1, decisionTime: 200 * time.Millisecond, growthCalls: 300, fleetTime: 2500 * time.Millisecond, benchTime: "100ms", quick: true}
	}
	cfg.command = "cd bench && go run ."
	if *quick {
		cfg.command += " -quick"
	}
	if *out != "" {
		cfg.command += " -out " + *out
	}
	if *svg != "" {
		cfg.command += " -svg " + *svg
	}
	_ = flag.Set("test.benchtime", cfg.benchTime)
	if err := run(cfg, *out, *svg, *only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// matrixCommand is the command line that reproduces this -matrix run.
func matrixCommand() string {
	cmd := "cd bench && go run ."
	flag.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "matrix") && f.Name != "matrix-verbose" { // it changes no figure
			v := f.Value.String()
			if f.Name == "matrix" {
				cmd += " -matrix"
				return
			}
			cmd += " -" + f.Name + " " + v
		}
	})
	return cmd
}

// startSuite starts the suite's redis-server and a temporary directory, and
// stops and removes them however the run ends: when the returned function is
// called, on a signal. The caller recovers a panic with it too.
func startSuite() (*server, string, func(), error) {
	tmp, err := os.MkdirTemp("", "throttle-bench")
	if err != nil {
		return nil, "", nil, err
	}
	srv, err := startRedis()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, "", nil, err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		srv.stop()
		_ = os.RemoveAll(tmp)
		fmt.Fprintln(os.Stderr, "bench: stopped by", s)
		os.Exit(1)
	}()
	return srv, tmp, func() { srv.stop(); _ = os.RemoveAll(tmp) }, nil
}

func runMatrix(o matrixOptions, command, out, svgPath, smallPath string) error {
	began := time.Now()
	progress := func(s string) { fmt.Fprintf(os.Stderr, "[%5.1fs] %s\n", time.Since(began).Seconds(), s) }
	srv, _, stop, err := startSuite()
	if err != nil {
		return err
	}
	defer stop()
	defer func() {
		if p := recover(); p != nil {
			stop()
			panic(p)
		}
	}()
	progress("redis-server " + srv.version + " on " + srv.addr)
	rdb, trips := newClient(srv.addr, 4)
	defer rdb.Close()
	e := &env{srv: srv, rdb: rdb, trips: trips}
	m := &matrixReport{opts: o, command: command, redisVersion: srv.version, began: began.UTC(), loadStart: loadAverage()}
	if m.cells, err = e.matrix(context.Background(), o, progress); err != nil {
		return err
	}
	m.took, m.loadEnd = time.Since(began), loadAverage()
	m.pictured = o.shapes[len(o.shapes)-1]
	if smallPath != "" {
		if err := os.WriteFile(smallPath, []byte(matrixSVG(smallFigure(o), m.cells, m.pictured)), 0o644); err != nil {
			return err
		}
	}
	if svgPath != "" {
		var err error
		if m.svg, err = writeSVG(out, svgPath, matrixSVG(o, m.cells, m.pictured)); err != nil {
			return err
		}
	}
	return writeMarkdown(out, m.markdown(), progress)
}

// writeSVG writes svg to svgPath and returns how the page at out refers to
// it: relative to out's folder when it can be.
func writeSVG(out, svgPath, svg string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(svgPath), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(svgPath, []byte(svg), 0o644); err != nil {
		return "", err
	}
	if out != "" {
		if rel, err := filepath.Rel(filepath.Dir(out), svgPath); err == nil {
			return rel, nil
		}
	}
	return svgPath, nil
}

// writeMarkdown writes md to out, or to standard output when out is empty.
func writeMarkdown(out, md string, progress func(string)) error {
	if out == "" {
		fmt.Print(md)
		return nil
	}
	progress("wrote " + out)
	return os.WriteFile(out, []byte(md), 0o644)
}

func run(cfg config, out, svgPath, only string) (err error) {
	began := time.Now()
	progress := func(s string) { fmt.Fprintf(os.Stderr, "[%5.1fs] %s\n", time.Since(began).Seconds(), s) }

	srv, tmp, stop, err := startSuite()
	if err != nil {
		return err
	}
	// Stop the server however the run ends: normally, on a panic, on a signal.
	defer stop()
	defer func() {
		if p := recover(); p != nil {
			stop()
			panic(p)
		}
	}()
	progress("redis-server " + srv.version + " on " + srv.addr)

	if only == "" || only == "fleet" {
		if cfg.strictapi, err = buildStrictAPI(tmp); err != nil {
			return err
		}
	}
	rdb, trips := newClient(srv.addr, 40)
	defer rdb.Close()
	e := &env{srv: srv, rdb: rdb, trips: trips, cfg: cfg}
	ctx := context.Background()
	rep := &report{cfg: cfg, redisVersion: srv.version, began: began.UTC(), loadStart: loadAverage()}
	if only == "" || only == "decisions" {
		if rep.decisions, err = e.decisions(ctx, progress); err != nil {
			return err
		}
	}
	if only == "" || only == "growth" {
		if rep.growth, err = e.growth(ctx, progress); err != nil {
			return err
		}
	}
	if only == "" || only == "memory" {
		if rep.memory, err = e.memory(ctx); err != nil {
			return err
		}
	}
	if only == "" || only == "inproc" {
		rep.inproc = e.inproc(progress)
	}
	if only == "" || only == "fleet" {
		if rep.fleet, err = e.fleet(ctx, progress); err != nil {
			return err
		}
	}
	rep.took = time.Since(began)
	rep.loadEnd = loadAverage()
	if svgPath != "" && rep.fleet != nil {
		if rep.svg, err = writeSVG(out, svgPath, fleetSVG(rep.fleet)); err != nil {
			return err
		}
	}
	return writeMarkdown(out, rep.markdown(), progress)
}
