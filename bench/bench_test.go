package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The suite's arithmetic, checked without Redis (CI runs these; it does not
// run the suite itself).

func TestSlidingCounts(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	// Windows of 100 ms ending every 50 ms: (t-100ms, t].
	got := slidingCounts(at(0, 10, 60, 100, 150, 260), t0, t0.Add(300*time.Millisecond), 100*time.Millisecond, 50*time.Millisecond)
	want := []int{1, 2, 3, 3, 1, 0, 1}
	if !slices.Equal(want, got) {
		t.Fatalf("slidingCounts = %v, want %v", got, want)
	}
}

func TestMedian(t *testing.T) {
	id := func(f float64) float64 { return f }
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in, id); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestSamplePercentiles(t *testing.T) {
	s := sample{n: 100, elapsed: time.Second}
	for i := range 100 {
		s.lat = append(s.lat, time.Duration(i+1)*time.Microsecond)
	}
	if s.pct(.5) != 51*time.Microsecond || s.pct(.99) != 100*time.Microsecond || s.perSec() != 100 {
		t.Fatalf("p50 %v p99 %v per second %v", s.pct(.5), s.pct(.99), s.perSec())
	}
}

func TestReportSaysMiss(t *testing.T) {
	r := &report{cfg: config{reps: 1, command: "x"}, memory: []memoryResult{{kind: kThrottle, entries: 100, bytes: 2000}}}
	md := r.markdown()
	if !strings.Contains(md, "≤ 12 bytes of Redis memory per logged request | 20.0 bytes (100 entries) | **MISS**") {
		t.Fatalf("a missed target is not reported as MISS:\n%s", md)
	}
}
