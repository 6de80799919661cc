//go:build integration

// The LLM fleet test runs examples/llm as a fleet: three processes of eight
// workers sharing one real redis-server, against one fake OpenAI API in the
// test process (internal/fakeapi) that counts requests and tokens per
// window on arrival, charges prompt + max_tokens and refunds to the usage
// when a response ends. RPM 500 and TPM 40,000 are kept, the minute scaled
// down to llmWindow, so that the TPM binds and a run is short. Each run is
// made twice: settled to the usage (Rule.Actual), and with the estimate
// kept (a fixed cost); settled again with a MaxWait of a whole window
// instead of the example's tenth, to show what a deep queue of waiting
// requests costs. The test asserts no 429 in any, and logs the share of the
// token budget used after the first window. More cold runs
// (a fresh Redis and fake API each), and their medians:
//
//	FLEET_LLM_RUNS=10 go test -tags integration -run TestFleetLLM -v ./examples
package examples_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/fakeapi"
)

const (
	llmWindow  = 2 * time.Second // the minute, scaled down
	llmWindows = 4               // measured after the first window
	llmProcs   = 3
	llmWorkers = 8
	llmRPM     = 500
	llmTPM     = 40_000
	// llmTokenTime is the time to generate a token, scaled with the minute
	// (10 ms a token in a minute's window).
	llmTokenTime = 10 * time.Millisecond * llmWindow / time.Minute
)

func TestFleetLLM(t *testing.T) {
	runs := 1
	if v := os.Getenv("FLEET_LLM_RUNS"); v != "" {
		var err error
		runs, err = strconv.Atoi(v)
		require.NoError(t, err, "FLEET_LLM_RUNS")
	}
	bin := filepath.Join(t.TempDir(), "llm")
	out, err := exec.Command("go", "build", "-o", bin, "./llm").CombinedOutput()
	require.NoError(t, err, "go build ./llm:\n%s", out)

	modes := []struct {
		name string
		args []string
	}{
		{"settled", nil},
		{"settled, max wait a window", []string{"-maxwait", llmWindow.String()}},
		{"estimate kept", []string{"-settle=false"}},
	}
	shares := make([][]float64, len(modes))
	for run := range runs {
		for i, m := range modes {
			share, stats := runLLMFleet(t, bin, m.args)
			t.Logf("run %d, %s: %.1f %% of the token budget after the first window; %d requests, %d × 429 (%d on tokens), %d tokens used of %d estimated",
				run+1, m.name, 100*share, stats.OK, stats.TooMany(), stats.TokensRefused, stats.Used, stats.Estimated)
			require.Zero(t, stats.TooMany(), "%s: the fleet kept both limits", m.name)
			shares[i] = append(shares[i], share)
		}
	}
	for i, m := range modes {
		t.Logf("%s: median %.1f %% of %d runs (%.1f %% to %.1f %%)", m.name, 100*median(shares[i]), runs,
			100*slices.Min(shares[i]), 100*slices.Max(shares[i]))
	}
}

// runLLMFleet runs the processes against a fresh Redis and API, and returns
// the share of the token budget they used in the windows after the first.
func runLLMFleet(t *testing.T, bin string, args []string) (float64, fakeapi.OpenAIStats) {
	t.Helper()
	srv, _ := startRedis(t)
	require.True(t, srv.Real, "a real redis-server")
	fake, err := fakeapi.NewOpenAI(fakeapi.OpenAIConfig{RPM: llmRPM, TPM: llmTPM, Window: llmWindow,
		TokenTime: llmTokenTime, Seed: uint64(time.Now().UnixNano())})
	require.NoError(t, err)
	api := httptest.NewServer(fake)
	defer api.Close()

	// The processes run a second longer than the windows measured, so that
	// each one runs through them whenever it started.
	d := (llmWindows+1)*llmWindow + time.Second
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([][]byte, llmProcs)
	errs := make([]error, llmProcs)
	for i := range llmProcs {
		cmd := exec.CommandContext(ctx, bin, "-redis", srv.Addr, "-api", api.URL,
			"-workers", strconv.Itoa(llmWorkers), "-duration", d.String(), "-per", llmWindow.String(),
			"-rpm", strconv.Itoa(llmRPM), "-tpm", strconv.Itoa(llmTPM))
		cmd.Args = append(cmd.Args, args...)
		cmd.Env = append(os.Environ(), "OPENAI_API_KEY=sk-fleet")
		wg.Go(func() { outs[i], errs[i] = cmd.CombinedOutput() })
	}
	wg.Wait()
	for i := range llmProcs {
		require.NoError(t, errs[i], "process %d:\n%s", i, outs[i])
		require.Contains(t, string(outs[i]), " 429=0", "process %d:\n%s", i, outs[i])
	}
	s := fake.Stats()
	from := s.First.Add(llmWindow)
	used := fake.Charged(from, from.Add(llmWindows*llmWindow))
	return float64(used) / (llmWindows * llmTPM), s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Sorted(slices.Values(v))
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
