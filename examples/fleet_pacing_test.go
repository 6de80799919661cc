//go:build integration

package examples_test

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/throttletest"
)

// TestFleetPacing runs the payments fleet with a paced rule (-paced) against
// upstreams that count by spacing, not by window: a strict-spacing GCRA
// (burst 0: two arrivals closer than 10ms are refused) with a paced rule of
// burst 0, and a token bucket of burst 10 with a paced rule of burst 10, both
// at the rule's own rate; and, for reference, a sliding-window upstream with
// a paced rule of burst 0, and the strict spacing with a window rule (which
// must move to a learned pace: its 429s in the first two seconds, but for
// the late ones a pace without a burst may meet). It
// logs, per run: the 429s (all, and after the first second),
// the share of the rate used (accepted over what the upstream could have
// accepted from the first arrival to the end: B + 1 + span/T), the script
// calls per request, and the closest two arrivals came. The guarantee is
// judged where the rows say (no 429 at all, the cold start included); the share and
// the calls of every paced row are bounded only against a regression (see
// minShare; a poll per wait).
//
//	FLEET_PACING_REPS=5 go test -tags integration -run TestFleetPacing -v ./examples
//
// FLEET_RATE defaults to 100 here; FLEET_DURATION and FLEET_PROCS as for
// TestFleet. FLEET_PACING_MARGIN overrides the rule's margin (default: the
// default margin).
func TestFleetPacing(t *testing.T) {
	if testing.Short() {
		t.Skip("the pacing fleet runs for about 20s")
	}
	rate, d, procs := fleetEnv(t)
	if os.Getenv("FLEET_RATE") == "" {
		rate = 100
	}
	reps := 1
	if v := os.Getenv("FLEET_PACING_REPS"); v != "" {
		var err error
		reps, err = strconv.Atoi(v)
		require.NoError(t, err, "FLEET_PACING_REPS")
	}
	var extra []string
	if v := os.Getenv("FLEET_PACING_MARGIN"); v != "" {
		extra = append(extra, "-margin", v)
	}
	dir := buildExamples(t)
	srv, rdb := startRedis(t)
	spacing := time.Second / time.Duration(rate)

	var table strings.Builder
	fmt.Fprintf(&table, "\nrate=%d/s, procs=%d x %d workers, %s per run, %s\n", rate, procs, workersPerProc, d, strings.Join(extra, " "))
	fmt.Fprintf(&table, "%-28s %-10s %-14s %-10s %-10s %-12s %s\n", "upstream / rule", "429s", "after 1st s", "share", "calls/req", "min gap", "wait p50/p99 (worst)")
	for _, tc := range []struct {
		name     string
		sub      string
		upstream throttletest.Algorithm
		burst    int  // of the upstream and of the rule
		log      bool // the rule is a window, not paced: a reference
		judged   bool // no 429 at all is required
		// minShare bounds the share of the rate against a regression. With
		// no burst every slot pays the process's allowance (its lateness,
		// measured), which a loaded machine raises to several spacings: 33%
		// was seen on strict spacing at load 4-5, 67-73% at load 1.5-4.
		minShare float64
	}{
		// Strict spacing leaves each slot a slack of Margin/N (50µs): the
		// guarantee holds for lateness within the allowance and a transit
		// that varies by at most that, but the transport measures lateness
		// up to when the connection is obtained, not when the request
		// reaches the upstream. On the
		// shared 2-core machine of the measurements, 4 of 5 runs met one
		// late 429 (and a loaded run 3), each 7.9-9.99ms after the accepted
		// arrival before it: that one reached the upstream later after its
		// wake than the slack allows. So this row is measured, not judged.
		{"gcra burst 0 / paced 0", "gcra0", throttletest.GCRA, 0, false, false, 0.2},
		{"token bucket 10 / paced 10", "bucket10", throttletest.GCRA, 10, false, true, 0.5},
		{"sliding log / paced 0", "sliding", throttletest.SlidingLog, 0, false, true, 0.2},
		// A window rule facing strict spacing: its first bursts meet 429s,
		// which move the key to a learned pace without a burst (a 429
		// despite compliance). After that it meets the late 429s of the
		// paced row above (a send that reaches the upstream later than
		// Margin/N allows: one was seen at +3.7s in a CI run), so it is
		// judged against the loop it replaces, which met 45-46 429s after
		// the first second of every run: at most maxLate after two seconds.
		{"gcra burst 0 / log", "gcra0-log", throttletest.GCRA, 0, true, false, 0},
	} {
		t.Run(tc.sub, func(t *testing.T) {
			for range reps {
				rule := []string{"-paced", "-burst", strconv.Itoa(tc.burst)}
				if tc.log {
					rule = nil
				}
				f := paymentsFleet(dir, rate, d, procs, 0, append(append([]string{"-redis", srv.Addr}, rule...), extra...)...)
				f.upstream = throttletest.Config{N: rate, Window: time.Second, Algorithm: tc.upstream, Burst: tc.burst}
				res := runFleet(t, rdb, f)
				tot := logSummaries(t, res)
				st := res.stats.Total
				received := st.Accepted + st.Rejected
				late, after2 := 0, 0
				for _, r := range st.RejectedAt {
					if r.Sub(st.FirstAccepted) > time.Second {
						late++
					}
					if r.Sub(st.FirstAccepted) > 2*time.Second {
						after2++
					}
				}
				// What the GCRA could have accepted from the first arrival
				// to the end of the run: the burst, then one per spacing.
				most := tc.burst + 1 + int(math.Floor(float64(res.end.Sub(st.FirstAccepted))/float64(spacing)))
				share := float64(st.Accepted) / float64(most)
				perReq := float64(res.calls) / float64(received)
				gap := time.Duration(math.MaxInt64)
				for i := 1; i < len(st.Arrivals); i++ {
					gap = min(gap, st.Arrivals[i].Sub(st.Arrivals[i-1]))
				}
				var p50, p99 time.Duration
				for _, s := range res.summaries {
					p50, p99 = max(p50, s.p50), max(p99, s.p99)
				}
				t.Logf("upstream: accepted=%d 429=%d (after the first second: %d, after two: %d) share=%.2f%% of %d; script calls=%d per request=%.3f; min gap %s",
					st.Accepted, st.Rejected, late, after2, 100*share, most, res.calls, perReq, gap)
				for _, r := range st.RejectedAt {
					// The accepted arrivals just before it: how close they came.
					var before []string
					for _, a := range st.Arrivals {
						if !a.After(r) && r.Sub(a) < 5*spacing {
							before = append(before, r.Sub(a).String())
						}
					}
					t.Logf("429 at +%s, after accepted arrivals %v before it", r.Sub(st.FirstAccepted), before)
				}
				fmt.Fprintf(&table, "%-28s %-10d %-14d %-10s %-10.3f %-12s %s / %s\n", tc.name, st.Rejected, late,
					fmt.Sprintf("%.1f%%", 100*share), perReq, gap, p50.Round(time.Millisecond), p99.Round(time.Millisecond))

				requireSentReceived(t, tot.sent, received, procs*workersPerProc, "payments")
				require.Zero(t, tot.errors, res.output)
				if tc.log {
					// The learned pace ends the loop of 429s; the share is
					// measured.
					const maxLate = 3
					if after2 > maxLate {
						t.Errorf("%d 429s after the first two seconds (%d in all): more than the %d late ones a pace without a burst may meet", after2, st.Rejected, maxLate)
					}
					continue
				}
				// Judged after every run is measured (Errorf, not Fatal).
				if st.Rejected > 0 && tc.judged {
					t.Errorf("%d 429s (%d after the first second)", st.Rejected, late)
				}
				if share < tc.minShare {
					t.Errorf("accepted %d of %d: below %.0f%% of the rate", st.Accepted, most, 100*tc.minShare)
				}
				if perReq > maxCallsPerRequest {
					t.Errorf("%.3f script calls per request", perReq)
				}
			}
		})
	}
	t.Log(table.String())
}
