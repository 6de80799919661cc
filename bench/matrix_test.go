package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The matrix's arithmetic, checked without Redis or processes.

func ms(v ...int) []time.Duration {
	var out []time.Duration
	for _, m := range v {
		out = append(out, time.Duration(m)*time.Millisecond)
	}
	return out
}

func TestMatrixRunFigures(t *testing.T) {
	// A 3 s run: 150 accepted from 1 s on (half the 200 sustained in 2 s),
	// 2 before; 429s at 0.5 s, 1.999 s and 2 s.
	r := matrixRun{dur: 3 * time.Second, rejected: ms(500, 1999, 2000), steadySent: 200, steadyTrips: 206}
	r.accepted = ms(0, 999)
	for i := range 150 {
		r.accepted = append(r.accepted, time.Second+time.Duration(i)*10*time.Millisecond)
	}
	r.accepted = append(r.accepted, 3*time.Second) // at the stop: not counted
	if got := r.shareAfter(time.Second); got != 0.75 {
		t.Errorf("shareAfter(1s) = %v, want 0.75", got)
	}
	if got := r.tooManyAfter(2 * time.Second); got != 1 {
		t.Errorf("tooManyAfter(2s) = %d, want 1", got)
	}
	if got := r.callsPerSent(); got != 1.03 {
		t.Errorf("callsPerSent = %v, want 1.03", got)
	}
	// 150 arrivals 10 ms apart from 1 s: 100 in 1 s, the full rate.
	if got := r.steadyRate(time.Second); got < 0.9999 || got > 1.0001 {
		t.Errorf("steadyRate(1s) = %v, want 1", got)
	}
	if got := r.steadyRate(2 * time.Second); got != 0 {
		t.Errorf("steadyRate with fewer than N+1 arrivals = %v, want 0", got)
	}
	if got := (matrixRun{dur: time.Second}).shareAfter(time.Second); got != 0 {
		t.Errorf("shareAfter of an empty span = %v, want 0", got)
	}
}

func TestCellStatsAndVerdict(t *testing.T) {
	strict, _ := gatewayByID("gcra-burst0")
	logUp, _ := gatewayByID("log")
	def := matrixConfigs[2]
	full := make([]time.Duration, 0, 200)
	for i := range 200 {
		full = append(full, time.Second+time.Duration(i)*10*time.Millisecond)
	}
	early := matrixRun{dur: 3 * time.Second, accepted: full, rejected: ms(100, 1500), steadySent: 100, steadyTrips: 101}
	clean := matrixRun{dur: 3 * time.Second, accepted: full[:196], steadySent: 100, steadyTrips: 102}
	c := matrixCell{up: strict, conf: def, runs: []matrixRun{early, clean}}
	s := c.stats()
	if s.runs != 2 || s.runsWith429 != 1 || s.tooMany != 2 || s.late != 0 || s.shareMin != 0.98 || s.shareMed != 0.99 || s.callsMax != 1.02 {
		t.Fatalf("stats = %+v", s)
	}
	// Strict spacing under the default: 429s in the first 2 s are allowed.
	if what, ok := c.verdict(); !ok || !strings.Contains(what, "after 2 s") {
		t.Errorf("strict upstream, early 429s: verdict %q %v, want a pass", what, ok)
	}
	// Any 429 against a sliding log misses.
	c.up = logUp
	if _, ok := c.verdict(); ok {
		t.Error("a 429 against the sliding log passed the default's target")
	}
	// The matching configuration asks for 99 %, of the median run.
	c = matrixCell{up: logUp, conf: matrixConfigs[1], runs: []matrixRun{clean}}
	if _, ok := c.verdict(); ok {
		t.Error("98 % passed the matching configuration's target of 99 %")
	}
	whole := matrixRun{dur: 3 * time.Second, accepted: full, steadySent: 100, steadyTrips: 100}
	c.runs = []matrixRun{clean, whole, whole}
	if _, ok := c.verdict(); !ok {
		t.Error("a median of 100 % (least 98 %) missed the matching configuration's target of 99 %")
	}
	// The bursts configuration is judged by nothing.
	c.conf = matrixConfigs[0]
	if what, _ := c.verdict(); what != "" {
		t.Errorf("bursts verdict %q, want none", what)
	}
}

func TestBinCountsAndAccepts(t *testing.T) {
	got := binCounts(ms(0, 49, 50, 120, 260), 300*time.Millisecond, 50*time.Millisecond)
	if want := []int{2, 3, 4, 4, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("binCounts = %v, want %v", got, want)
	}
	b1, _ := gatewayByID("rate-burst1")
	b100, _ := gatewayByID("rate-burst100")
	fixed, _ := gatewayByID("fixed")
	counter, _ := gatewayByID("counter")
	for _, c := range []struct {
		g    gatewayKind
		t    time.Duration
		want int
	}{{b1, 0, 1}, {b1, time.Second, 101}, {b100, 500 * time.Millisecond, 150}, {fixed, 0, 100}, {counter, time.Second, 200}} {
		if got := accepts(c.g, c.t); got != c.want {
			t.Errorf("accepts(%s, %v) = %d, want %d", c.g.id, c.t, got, c.want)
		}
	}
}

func TestSelectMatrix(t *testing.T) {
	o, err := selectMatrix(2, 3*time.Second, "all", "1x1,3×4", "bursts,default")
	if err != nil {
		t.Fatal(err)
	}
	if len(o.upstreams) != len(gatewayKinds) || !slices.Equal(o.shapes, []shape{{1, 1}, {3, 4}}) || len(o.configs) != 2 || o.configs[1].id != "default" {
		t.Fatalf("selectMatrix = %+v", o)
	}
	for _, bad := range [][3]string{{"nope", "all", "all"}, {"all", "3x", "all"}, {"all", "0x4", "all"}, {"all", "all", "clever"}} {
		if _, err := selectMatrix(1, 3*time.Second, bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("selectMatrix(%q) accepted", bad)
		}
	}
	if _, err := selectMatrix(0, 3*time.Second, "all", "all", "all"); err == nil {
		t.Error("0 runs accepted")
	}
}

func TestMatrixReportSaysMiss(t *testing.T) {
	logUp, _ := gatewayByID("log")
	o := matrixOptions{runs: 1, dur: 3 * time.Second, upstreams: []gatewayKind{logUp}, shapes: []shape{{3, 4}}, configs: matrixConfigs}
	cell := matrixCell{up: logUp, sh: shape{3, 4}, conf: matrixConfigs[1], runs: []matrixRun{{dur: 3 * time.Second, rejected: ms(2500), steadySent: 10, steadyTrips: 10}}}
	m := &matrixReport{opts: o, command: "x", cells: []matrixCell{cell}}
	md := m.markdown()
	if !strings.Contains(md, "| exact sliding log | matching | 3×4 | 1 / 1 | 1 | 1 | 0.0 % / 0.0 % | 0.0 % | 1.000 / 1.000 | **MISS**") {
		t.Fatalf("a missed target is not reported as MISS:\n%s", md)
	}
	if small := smallFigure(o); len(small.upstreams) != 1 || len(small.configs) != 2 || small.configs[1].id != "default" {
		t.Errorf("smallFigure = %+v", small)
	}
	if svg := matrixSVG(o, []matrixCell{cell}, shape{3, 4}); !strings.Contains(svg, "exact sliding log: 1 × 429, 0 %") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Fatalf("the figure does not show the run:\n%s", svg)
	}
}
