package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// The in-process rows: throttle's memory store beside golang.org/x/time/rate
// and sethvargo/go-limiter's memorystore, one key, measured with
// testing.Benchmark (the same numbers `go test -bench` prints), serial and
// with b.RunParallel; and throttle's RoundTrip with the memory store.

type inprocResult struct {
	name     string
	path     string // "admitted" or "refused"
	parallel bool
	ns       float64
	allocs   int64
	bytes    int64
}

type inprocCase struct {
	name, path string
	bench      func(parallel bool) func(b *testing.B)
}

// serialOrParallel runs step b.N times, or over b.RunParallel.
func serialOrParallel(parallel bool, step func() bool) func(b *testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		fail := func() { b.Fatal("unexpected decision") }
		if !parallel {
			for b.Loop() {
				if !step() {
					fail()
				}
			}
			return
		}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !step() {
					fail()
					return
				}
			}
		})
	}
}

func inprocCases() []inprocCase {
	ctx := context.Background()
	// Admitted: a limit no benchmark reaches. Refused: one unit per hour,
	// spent before the loop.
	big := contract.Limit{N: 1 << 30, Per: 10 * time.Millisecond}
	tiny := contract.Limit{N: 1, Per: time.Hour}
	memStore := func(l contract.Limit, want bool) func(bool) func(*testing.B) {
		return func(parallel bool) func(*testing.B) {
			m, _ := store.NewMemory()
			req := contract.Request{Limits: []contract.Limit{l}, Cost: 1}
			_, _ = m.Reserve(ctx, "k", req)
			return serialOrParallel(parallel, func() bool {
				r, err := m.Reserve(ctx, "k", req)
				return err == nil && r.Allowed == want
			})
		}
	}
	xrate := func(r rate.Limit, burst int, want bool) func(bool) func(*testing.B) {
		return func(parallel bool) func(*testing.B) {
			lim := rate.NewLimiter(r, burst)
			lim.AllowN(time.Now(), 1)
			return serialOrParallel(parallel, func() bool { return lim.AllowN(time.Now(), 1) == want })
		}
	}
	goLimiter := func(tokens uint64, interval time.Duration, want bool) func(bool) func(*testing.B) {
		return func(parallel bool) func(*testing.B) {
			s, _ := memorystore.New(&memorystore.Config{Tokens: tokens, Interval: interval})
			_, _, _, _, _ = s.Take(ctx, "k")
			return serialOrParallel(parallel, func() bool {
				_, _, _, ok, err := s.Take(ctx, "k")
				return err == nil && ok == want
			})
		}
	}
	roundTrip := func(l contract.Limit, want bool) func(bool) func(*testing.B) {
		return func(parallel bool) func(*testing.B) {
			m, _ := store.NewMemory()
			tr, _ := throttle.New(okTransport{}, m, throttle.WithRule(throttle.Rule{
				Host: "api.example", Limits: []throttle.Limit{throttle.Limit(l)}, Key: throttle.Fixed("k"), FailFast: true,
			}))
			req, _ := http.NewRequest(http.MethodGet, "http://api.example/v1/x", nil)
			_, _ = tr.RoundTrip(req)
			return serialOrParallel(parallel, func() bool {
				resp, err := tr.RoundTrip(req)
				if resp != nil {
					_ = resp.Body.Close()
				}
				return (err == nil) == want
			})
		}
	}
	return []inprocCase{
		{"throttle store.Memory Reserve", "admitted", memStore(big, true)},
		{"x/time/rate AllowN", "admitted", xrate(rate.Limit(1e11), 1<<30, true)},
		{"go-limiter memorystore Take", "admitted", goLimiter(1<<30, time.Hour, true)},
		{"throttle store.Memory Reserve", "refused", memStore(tiny, false)},
		{"x/time/rate AllowN", "refused", xrate(rate.Every(time.Hour), 1, false)},
		{"go-limiter memorystore Take", "refused", goLimiter(1, time.Hour, false)},
		{"throttle Transport.RoundTrip (memory store)", "admitted", roundTrip(big, true)},
		{"throttle Transport.RoundTrip (memory store)", "refused", roundTrip(tiny, false)},
	}
}

// inproc runs every case once per repetition, the cases in turn within a
// repetition (as the decision rows do), so that a slow spell of the machine
// falls on all of them rather than on the rows that happened to run then.
func (e *env) inproc(progress func(string)) []inprocResult {
	cases := inprocCases()
	runs := make([][2][]testing.BenchmarkResult, len(cases))
	for rep := range e.cfg.decisionReps {
		progress(fmt.Sprintf("in-process: repetition %d of %d", rep+1, e.cfg.decisionReps))
		for i, c := range cases {
			for p, parallel := range []bool{false, true} {
				runs[i][p] = append(runs[i][p], testing.Benchmark(c.bench(parallel)))
			}
		}
	}
	var out []inprocResult
	for i, c := range cases {
		for p, parallel := range []bool{false, true} {
			rs := runs[i][p]
			r := inprocResult{name: c.name, path: c.path, parallel: parallel,
				ns:     median(rs, func(r testing.BenchmarkResult) float64 { return float64(r.T) / float64(r.N) }),
				allocs: int64(median(rs, func(r testing.BenchmarkResult) float64 { return float64(r.AllocsPerOp()) })),
				bytes:  int64(median(rs, func(r testing.BenchmarkResult) float64 { return float64(r.AllocedBytesPerOp()) })),
			}
			progress(fmt.Sprintf("in-process: %-45s %-8s parallel=%-5v %6.1f ns/op %d allocs/op", c.name, c.path, parallel, r.ns, r.allocs))
			out = append(out, r)
		}
	}
	return out
}
