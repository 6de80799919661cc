//go:build integration

package examples_test

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/throttletest"
)

// TestFleetStrictSpacing runs the payments fleet with the default rule
// (PerSecond(rate), nothing else stated) against a strict-spacing upstream
// (a GCRA without burst: two arrivals closer than Per/N are refused), each
// run cold (a fresh Redis and upstream), and logs per run the 429s in the
// first two seconds after the first accepted arrival and after them, and
// the share of the rate accepted after the first second (accepted over
// floor(span/spacing)), and the spread of the sends as the upstream saw
// them after that second: their median spacing less the shortest (so that
// no two come closer than the upstream's spacing, the typical spacing must
// exceed it by that much: a bound on the share of
// spacing/(spacing+spread)); then the medians and ranges:
//
//	FLEET_STRICT_RUNS=10 go test -tags integration -run TestFleetStrictSpacing -v ./examples
//
// FLEET_RATE defaults to 100 here; FLEET_DURATION and FLEET_PROCS as for
// TestFleet. The figures are measured; a run is judged only against the
// loop the learned pace replaced (maxLate 429s after two seconds), since a
// shared machine's stalls reach the upstream's strict spacing.
func TestFleetStrictSpacing(t *testing.T) {
	if testing.Short() {
		t.Skip("the strict-spacing fleet runs for several seconds per run")
	}
	rate, d, procs := fleetEnv(t)
	if os.Getenv("FLEET_RATE") == "" {
		rate = 100
	}
	runs := 3
	if v := os.Getenv("FLEET_STRICT_RUNS"); v != "" {
		var err error
		runs, err = strconv.Atoi(v)
		require.NoError(t, err, "FLEET_STRICT_RUNS")
		require.Positive(t, runs, "FLEET_STRICT_RUNS")
	}
	dir := buildExamples(t)
	srv, rdb := startRedis(t)
	spacing := time.Second / time.Duration(rate)

	var early, late []int
	var shares, spreads []float64
	var table strings.Builder
	fmt.Fprintf(&table, "\nstrict spacing (GCRA burst 0) at %d/s, default rule, %d x %d workers, %s per run\n", rate, procs, workersPerProc, d)
	fmt.Fprintf(&table, "%-4s %-16s %-16s %-16s %-12s %s\n", "run", "429s first 2s", "429s after 2s", "share after 1s", "spread", "bound")
	for i := range runs {
		f := paymentsFleet(dir, rate, d, procs, 0, "-redis", srv.Addr)
		f.upstream = throttletest.Config{N: rate, Window: time.Second, Algorithm: throttletest.GCRA}
		res := runFleet(t, rdb, f)
		tot := logSummaries(t, res)
		st := res.stats.Total
		requireSentReceived(t, tot.sent, st.Accepted+st.Rejected, procs*workersPerProc, "payments")
		require.Zero(t, tot.errors, res.output)

		first, after := splitRejected(st, 2*time.Second)
		edge := st.FirstAccepted.Add(time.Second)
		accepted := 0
		for _, a := range st.Arrivals {
			if !a.Before(edge) {
				accepted++
			}
		}
		most := int(math.Floor(float64(res.end.Sub(edge)) / float64(spacing)))
		share := float64(accepted) / float64(most)
		spread := sendSpread(st, edge)
		early, late, shares, spreads = append(early, first), append(late, after), append(shares, share), append(spreads, spread.Seconds()*1000)
		fmt.Fprintf(&table, "%-4d %-16d %-16d %-16s %-12s %.1f%%\n", i+1, first, after, fmt.Sprintf("%.1f%%", 100*share),
			spread.Round(10*time.Microsecond), 100*float64(spacing)/float64(spacing+spread))
		for _, r := range st.RejectedAt {
			t.Logf("run %d: 429 at +%s", i+1, r.Sub(st.FirstAccepted).Round(time.Millisecond))
		}
		const maxLate = 3
		if after > maxLate {
			t.Errorf("run %d: %d 429s after the first two seconds: more than %d", i+1, after, maxLate)
		}
	}
	clean := 0
	for _, n := range late {
		if n == 0 {
			clean++
		}
	}
	slices.Sort(shares)
	slices.Sort(spreads)
	fmt.Fprintf(&table, "runs without a 429 after 2s: %d of %d; 429s in the first 2s: %v; share after 1s: median %.1f%%, range %.1f-%.1f%%; spread: median %.2fms, range %.2f-%.2fms\n",
		clean, runs, early, 100*shares[len(shares)/2], 100*shares[0], 100*shares[len(shares)-1], spreads[len(spreads)/2], spreads[0], spreads[len(spreads)-1])
	t.Log(table.String())
}

// sendSpread returns the spread of the arrivals (accepted or refused) from
// edge on: their median spacing less the shortest (the median, not the
// mean: a stall of the fleet lengthens a few spacings, not the typical one).
func sendSpread(st throttletest.KeyStats, edge time.Time) time.Duration {
	var at []time.Time
	for _, a := range append(slices.Clone(st.Arrivals), st.RejectedAt...) {
		if !a.Before(edge) {
			at = append(at, a)
		}
	}
	if len(at) < 2 {
		return 0
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	gaps := make([]time.Duration, len(at)-1)
	for i := range gaps {
		gaps[i] = at[i+1].Sub(at[i])
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2] - gaps[0]
}
