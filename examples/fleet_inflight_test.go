//go:build integration

// The in-flight fleet test: several OS processes share a cap on requests in
// flight (Rule.InFlight) through one real redis-server, against an upstream
// that answers 429 to any request above the cap (throttletest's
// MaxInFlight). One more process takes leases, holds them past their
// duration (renewing them), and is killed with SIGKILL: the others must stay
// under the cap while its leases live, and use the whole cap once they
// expired. The processes are this test binary, run again as workers
// (TestInFlightWorker).
//
//	go test -tags integration -run TestInFlightFleet -v ./examples
package examples_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

const (
	inflightCap   = 5
	inflightLease = 2 * time.Second
	// victimLeases are the leases the killed process holds.
	victimLeases = 2
)

// inflightSummary is a worker process's last line.
type inflightSummary struct {
	Sent, OK, TooMany, Limited, Errors int
}

func TestInFlightFleet(t *testing.T) {
	_, rdb := startRedis(t)
	up, err := throttletest.NewUpstream(throttletest.Config{N: 1_000_000, Window: time.Second, MaxInFlight: inflightCap, ServiceTime: 20 * time.Millisecond})
	require.NoError(t, err)
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	addr := rdb.Options().Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	worker := func(workers int, hold, d time.Duration) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestInFlightWorker$")
		cmd.Env = append(os.Environ(), "INFLIGHT_WORKER=1", "INFLIGHT_REDIS="+addr, "INFLIGHT_URL="+srv.URL,
			"INFLIGHT_WORKERS="+strconv.Itoa(workers), "INFLIGHT_HOLD="+hold.String(), "INFLIGHT_DURATION="+d.String())
		cmd.Stderr = os.Stderr
		return cmd
	}
	calls0 := redisCalls(t, rdb)

	// The victim takes its leases first and holds them, renewing.
	victim := worker(victimLeases, time.Hour, time.Hour)
	vout, err := victim.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, victim.Start())
	lines := bufio.NewScanner(vout)
	for range victimLeases {
		require.True(t, lines.Scan(), "the victim's holding lines")
		require.Equal(t, "holding", lines.Text())
	}
	holding := time.Now()

	const procs, workers = 3, 4
	run := 4*inflightLease + 3*time.Second
	var outs []*strings.Builder
	var cmds []*exec.Cmd
	for range procs {
		c := worker(workers, 0, run)
		out := new(strings.Builder)
		c.Stdout = out
		require.NoError(t, c.Start())
		cmds, outs = append(cmds, c), append(outs, out)
	}
	// Killed after its leases outlived a LeaseFor: renewed meanwhile.
	time.Sleep(inflightLease + time.Second)
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	_ = victim.Wait()

	total := inflightSummary{}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), "worker %d", i)
		var s inflightSummary
		var last string // the summary: the test binary prints PASS after it
		for line := range strings.SplitSeq(outs[i].String(), "\n") {
			if strings.HasPrefix(line, "{") {
				last = line
			}
		}
		require.NoError(t, json.Unmarshal([]byte(last), &s), "worker %d: %q", i, outs[i].String())
		total.Sent += s.Sent
		total.OK += s.OK
		total.TooMany += s.TooMany
		total.Limited += s.Limited
		total.Errors += s.Errors
	}
	calls := redisCalls(t, rdb).minus(calls0)

	st := up.Stats()
	key := st.Keys[""]
	// Renewed every LeaseFor/2 until the kill, the victim's leases expire
	// between kill + LeaseFor/2 and kill + LeaseFor; the window ends well
	// before the first, so that a renewal late by up to LeaseFor/4 (a
	// loaded machine) still counts.
	blocked := peakInFlight(key, holding.Add(200*time.Millisecond), killed.Add(inflightLease/4))
	recovered := peakInFlight(key, killed.Add(inflightLease+500*time.Millisecond), time.Now())
	t.Logf("%d processes × %d workers, cap %d, LeaseFor %s: %d sent, %d answered 200, %d 429 (upstream: %d rejected), %d refused, %d errors",
		procs, workers, inflightCap, inflightLease, total.Sent, total.OK, total.TooMany, st.Total.Rejected, total.Limited, total.Errors)
	t.Logf("peak in flight at the upstream: %d while the killed process's %d leases lived, %d after they expired", blocked, victimLeases, recovered)
	t.Logf("redis calls: %d for %d requests (%.2f per request; %s)", calls.total(), total.Sent+victimLeases,
		float64(calls.total())/float64(total.Sent+victimLeases), calls)

	// A request that finds a lease free costs 2 calls (the reservation with
	// the lease, the release); one that waits in the queue 4 (+ its share of
	// the BLPOP that wakes it, and a check per second it waits): here,
	// 12 workers on 5 leases, nearly all wait.
	assert.LessOrEqual(t, float64(calls.total())/float64(total.Sent+victimLeases), 4.5, "Redis calls per request")
	assert.Zero(t, st.Total.Rejected, "429s at the upstream")
	assert.Zero(t, total.TooMany)
	assert.Zero(t, total.Errors)
	assert.Equal(t, inflightCap-victimLeases, blocked, "the dead process's leases still count, and the rest of the cap is used")
	assert.Equal(t, inflightCap, recovered, "the whole cap is used again once they expired")
}

// peakInFlight is the most requests in flight at the upstream at an
// accepted arrival in [from, to].
func peakInFlight(k throttletest.KeyStats, from, to time.Time) int {
	most := 0
	for i, at := range k.Arrivals {
		if !at.Before(from) && !at.After(to) {
			most = max(most, k.InFlight[i])
		}
	}
	return most
}

// callStats counts the commands a run cost at the server.
type callStats struct{ evalsha, eval, blpop int64 }

func (c callStats) total() int64 { return c.evalsha + c.eval + c.blpop }
func (c callStats) String() string {
	return fmt.Sprintf("%d EVALSHA, %d EVAL, %d BLPOP", c.evalsha, c.eval, c.blpop)
}

func (c callStats) minus(o callStats) callStats {
	return callStats{c.evalsha - o.evalsha, c.eval - o.eval, c.blpop - o.blpop}
}

func redisCalls(t *testing.T, rdb *redis.Client) callStats {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var c callStats
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "cmdstat_evalsha":
			dst = &c.evalsha
		case "cmdstat_eval":
			dst = &c.eval
		case "cmdstat_blpop":
			dst = &c.blpop
		default:
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				*dst, err = strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, line)
			}
		}
	}
	return c
}

// TestInFlightWorker is a worker process of TestInFlightFleet (skipped
// otherwise): INFLIGHT_WORKERS goroutines send requests through one
// Transport for INFLIGHT_DURATION, each holding its response's body open for
// INFLIGHT_HOLD (then printing "holding") before reading and closing it. It
// prints an inflightSummary as a JSON line.
func TestInFlightWorker(t *testing.T) {
	if os.Getenv("INFLIGHT_WORKER") == "" {
		t.Skip("a worker of TestInFlightFleet")
	}
	env := func(k string) string { return os.Getenv("INFLIGHT_" + k) }
	workers, err := strconv.Atoi(env("WORKERS"))
	require.NoError(t, err)
	hold, err := time.ParseDuration(env("HOLD"))
	require.NoError(t, err)
	d, err := time.ParseDuration(env("DURATION"))
	require.NoError(t, err)

	rdb := redis.NewClient(&redis.Options{Addr: env("REDIS")})
	defer rdb.Close()
	st, err := store.NewRedis(rdb)
	require.NoError(t, err)
	host := strings.TrimPrefix(env("URL"), "http://")
	tr, err := throttle.New(&http.Transport{MaxIdleConnsPerHost: workers}, st, throttle.WithRule(throttle.Rule{
		Host: host, Limits: []throttle.Limit{throttle.PerSecond(1_000_000)}, Key: throttle.Fixed("merchant"),
		InFlight: inflightCap, LeaseFor: inflightLease, MaxWait: 30 * time.Second,
	}))
	require.NoError(t, err)
	client := &http.Client{Transport: tr}

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var sum inflightSummary
	var printMu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, env("URL")+"/pay", nil)
				resp, err := client.Do(req)
				mu.Lock()
				sum.Sent++
				var le *throttle.LimitError
				switch {
				case err == nil && resp.StatusCode == http.StatusOK:
					sum.OK++
				case err == nil && resp.StatusCode == http.StatusTooManyRequests:
					sum.TooMany++
				case errors.As(err, &le):
					sum.Limited++
				case ctx.Err() != nil:
					sum.Sent-- // the run ended
				default:
					sum.Errors++
					fmt.Fprintln(os.Stderr, "worker:", err)
				}
				mu.Unlock()
				if err != nil {
					continue
				}
				if hold > 0 {
					printMu.Lock()
					fmt.Println("holding")
					printMu.Unlock()
					time.Sleep(hold)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	out, err := json.Marshal(sum)
	require.NoError(t, err)
	fmt.Println(string(out))
}
