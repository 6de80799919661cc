// Command bench measures throttle beside the Redis rate limiters its users
// would otherwise pick, in one run on one redis-server, and writes
// BENCHMARKS.md and a picture of a fleet run.
//
//	cd bench && go run . -out ../BENCHMARKS.md -svg ../docs/fleet.svg
//	cd bench && go run . -quick            # a fast smoke run, to stdout
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
	flag.Parse()
	if *worker != "" {
		runWorker(*worker)
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

func run(cfg config, out, svgPath, only string) (err error) {
	began := time.Now()
	progress := func(s string) { fmt.Fprintf(os.Stderr, "[%5.1fs] %s\n", time.Since(began).Seconds(), s) }

	tmp, err := os.MkdirTemp("", "throttle-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	srv, err := startRedis()
	if err != nil {
		return err
	}
	// Stop the server however the run ends: normally, on a panic, on a signal.
	defer srv.stop()
	defer func() {
		if p := recover(); p != nil {
			srv.stop()
			panic(p)
		}
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		srv.stop()
		_ = os.RemoveAll(tmp)
		fmt.Fprintln(os.Stderr, "bench: stopped by", s)
		os.Exit(1)
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
		if err := os.MkdirAll(filepath.Dir(svgPath), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(svgPath, []byte(fleetSVG(rep.fleet)), 0o644); err != nil {
			return err
		}
		rep.svg = svgPath
		if out != "" {
			if rel, err := filepath.Rel(filepath.Dir(out), svgPath); err == nil {
				rep.svg = rel
			}
		}
	}
	md := rep.markdown()
	if out == "" {
		fmt.Print(md)
		return nil
	}
	progress("wrote " + out)
	return os.WriteFile(out, []byte(md), 0o644)
}
