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

// TestFleetFeedback runs the payments fleet configured for 60 per second
// against a strict upstream that really allows 40 (a vendor lowered the
// limit), answering 429 with Retry-After and, depending on the scenario,
// rate-limit headers. With feedback the fleet learns the real limit and stops
// collecting 429s after the first window; without (IgnoreUpstream), it keeps
// sending 60 per second and collects about 20 429s every second.
//
//	go test -tags integration -run 'TestFleetFeedback$' -v ./examples/
//
// FLEET_FEEDBACK_REPS=3 repeats every scenario.
func TestFleetFeedback(t *testing.T) {
	if testing.Short() {
		t.Skip("the feedback fleet test runs for about 25s")
	}
	const configured, real, w = 60, 40, time.Second
	const d = 4500 * time.Millisecond
	procs := defaultProcs
	reps := 1
	if v := os.Getenv("FLEET_FEEDBACK_REPS"); v != "" {
		var err error
		reps, err = strconv.Atoi(v)
		require.NoError(t, err, "FLEET_FEEDBACK_REPS")
	}
	dir := buildExamples(t)
	srv, rdb := startRedis(t)

	scenarios := []struct {
		name     string
		upstream throttletest.Config
		extra    []string
		// check asserts on the 429s after the first window and the share
		// of the real limit used; nil logs only.
		check func(t *testing.T, late int, share float64)
	}{
		// The bounds are generous: on a quiet machine these runs see no
		// 429 after the first window and use all of the real limit, but a
		// process stalled by a busy machine sends late, meets a 429, and
		// the pause it causes costs the fleet up to a window. A deaf fleet
		// collects about 20 per second.
		{"feedback, IETF RateLimit headers", throttletest.Config{IETF: true}, nil, feedbackBounds},
		{"feedback, X-RateLimit headers", throttletest.Config{XRateLimit: true}, nil, feedbackBounds},
		{"feedback, Retry-After only", throttletest.Config{}, nil, nil},
		{"no feedback (IgnoreUpstream)", throttletest.Config{IETF: true}, []string{"-ignore-upstream"}, func(t *testing.T, late int, share float64) {
			require.GreaterOrEqual(t, late, 40, "a fleet deaf to the upstream keeps collecting 429s")
		}},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\nconfigured %d/s, upstream really %d/s, %d processes x %d workers, %s per run\n", configured, real, procs, workersPerProc, d)
	fmt.Fprintf(&table, "%-36s %-22s %-24s %s\n", "scenario", "429s: first window", "429s: after it", "share of the real limit (after the first window)")
	for _, sc := range scenarios {
		t.Run(strings.NewReplacer(" ", "_", ",", "", "(", "", ")", "").Replace(sc.name), func(t *testing.T) {
			var firsts, lates, shares []string
			for range reps {
				cfg := sc.upstream
				cfg.N, cfg.Window = real, w
				f := paymentsFleet(dir, configured, d, procs, 0, append([]string{"-redis", srv.Addr}, sc.extra...)...)
				f.upstream = cfg
				res := runFleet(t, rdb, f)
				tot := logSummaries(t, res)
				st := res.stats.Total
				first, late := splitRejected(st, w)
				share, after := lateShare(st, real, w, res.end)
				steady := steadyShare(real, w, st.Arrivals)
				t.Logf("upstream: accepted=%d 429=%d (first window %d, after %d); share of the real limit: %.1f%% overall, %.1f%% after the first window, steady %.1f%% of N/W",
					st.Accepted, st.Rejected, first, late, 100*share, 100*after, 100*steady)
				require.Zero(t, tot.errors, res.output)
				requireSentReceived(t, tot.sent, st.Accepted+st.Rejected, procs*workersPerProc, sc.name)
				require.Equal(t, st.Rejected, tot.tooMany, "the processes saw every 429")
				if sc.check != nil {
					sc.check(t, late, after)
				}
				firsts = append(firsts, strconv.Itoa(first))
				lates = append(lates, strconv.Itoa(late))
				shares = append(shares, fmt.Sprintf("%.1f%% (steady %.1f%%)", 100*after, 100*steady))
			}
			fmt.Fprintf(&table, "%-36s %-22s %-24s %s\n", sc.name, strings.Join(firsts, ", "), strings.Join(lates, ", "), strings.Join(shares, ", "))
		})
	}
	t.Log(table.String())
}

func feedbackBounds(t *testing.T, late int, share float64) {
	require.LessOrEqual(t, late, 10, "429s after the first window")
	require.GreaterOrEqual(t, share, 0.7, "share of the real limit used after the first window")
}

// splitRejected counts the 429s in the first window after the first accepted
// arrival, and after it.
func splitRejected(st throttletest.KeyStats, w time.Duration) (first, late int) {
	edge := st.FirstAccepted.Add(w)
	for _, r := range st.RejectedAt {
		if r.Before(edge) {
			first++
		} else {
			late++
		}
	}
	return first, late
}

// lateShare is the accepted arrivals as a share of what an exact client of
// the real limit could have had accepted (optimum): over the whole run, and
// from the end of the first window on.
func lateShare(st throttletest.KeyStats, n int, w time.Duration, end time.Time) (overall, after float64) {
	overall = float64(st.Accepted) / float64(optimum(n, w, st.FirstAccepted, end))
	edge := st.FirstAccepted.Add(w)
	count := 0
	for _, a := range st.Arrivals {
		if !a.Before(edge) {
			count++
		}
	}
	windows := math.Ceil(float64(end.Sub(edge)) / float64(w))
	return overall, float64(count) / (float64(n) * windows)
}
