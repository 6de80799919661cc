//go:build integration

package examples_test

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/throttletest"
)

// TestFleetPerTokenAndApp runs the instagram example as a fleet against a
// strict upstream that limits each token and, separately, the whole app
// (fewer per window than the tokens together could send): each request is
// reserved under its token and the app in one script call, and the
// upstream answers no 429, on one redis-server and on a Redis Cluster,
// where the app's hash tag keeps every key of the rule in one slot.
func TestFleetPerTokenAndApp(t *testing.T) {
	if testing.Short() {
		t.Skip("the fleet test runs for several seconds")
	}
	_, d, procs := fleetEnv(t)
	dir := buildExamples(t)
	const n, appN, w = 40, 70, 2 * time.Second // three tokens could send 120 per window; the app allows 70
	tokens := []string{"IGQVJtok-app-0001", "IGQVJtok-app-0002", "IGQVJtok-app-0003"}
	id := (time.Duration(math.Round(float64(d)/float64(w)-0.5)) * w) + w/2

	run := func(t *testing.T, rdb redis.UniversalClient, addrs string) result {
		f := fleet{
			bin:     filepath.Join(dir, "instagram"),
			urlFlag: "-api",
			args: []string{
				"-redis", addrs, "-tokens", strings.Join(tokens, ","),
				"-rate", strconv.Itoa(n), "-app-rate", strconv.Itoa(appN), "-per", w.String(),
				"-workers", strconv.Itoa(workersPerProc), "-mode", "wait", "-margin", burstMargin,
			},
			procs:    procs,
			duration: id,
			upstream: throttletest.Config{N: n, Window: w, Also: []throttletest.Config{{N: appN, Window: w}}},
			keyQuery: "access_token",
		}
		res := runFleet(t, rdb, f)
		tot := logSummaries(t, res)
		st := res.stats.Total
		received := st.Accepted + st.Rejected
		opt := optimum(appN, w, st.FirstAccepted, res.end)
		share := float64(st.Accepted) / float64(opt)
		perReq := float64(res.calls) / float64(received)
		t.Logf("upstream: accepted=%d 429=%d; app optimum=%d share=%.2f%% steady=%.2f%% of the app's N/W, min gap of the app=%s; script calls=%d per request=%.3f",
			st.Accepted, st.Rejected, opt, 100*share, 100*steadyShare(appN, w, st.Arrivals), minGap(appN, st.Arrivals), res.calls, perReq)
		// Which limit refused: the app's rejections are the requests it
		// had no room for; a token's, those of that token, refused by
		// either limit.
		t.Logf("app: accepted=%d 429=%d min gap=%s", res.app.Accepted, res.app.Rejected, minGap(appN, res.app.Arrivals))
		explain429(t, res.app, appN, w)
		for i, tok := range tokens {
			ks := res.stats.Keys[tok]
			t.Logf("token %d: accepted=%d 429=%d min gap=%s", i+1, ks.Accepted, ks.Rejected, minGap(n, ks.Arrivals))
			explain429(t, ks, n, w)
		}
		require.Zero(t, st.Rejected, "429s at the upstream\n%s", res.output)
		require.GreaterOrEqual(t, minGap(appN, st.Arrivals), w, "the app's window held more than its N")
		requireSentReceived(t, tot.sent, received, procs*workersPerProc, "instagram")
		require.Zero(t, tot.errors, res.output)
		requireHealthyEnd(t, res, "instagram")
		require.GreaterOrEqual(t, share, 0.9, "accepted %d of the app's optimum of %d", st.Accepted, opt)
		require.LessOrEqual(t, perReq, maxCallsPerRequest, "script calls per request")
		return res
	}
	t.Run("redis", func(t *testing.T) {
		srv, rdb := startRedis(t)
		run(t, rdb, srv.Addr)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		res := run(t, c.Client(t), strings.Join(c.Addrs(), ","))
		require.Contains(t, res.output, "Redis Cluster at ", "the processes did not use a cluster client")
	})
}
