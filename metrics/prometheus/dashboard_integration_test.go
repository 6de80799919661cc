//go:build integration

package throttleprom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dashboard is what the test reads of dashboard.json.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboard runs the example twice (with a shadow rule and lanes, and
// with tenants) and a real Prometheus server (Debian's prometheus package)
// scraping them every second, and checks that every query of every panel of
// dashboard.json returns data: at least one series with a finite value.
func TestDashboard(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prometheus is not installed (Debian's package prometheus); .ci/run installs it")
		}
		t.Skip("prometheus is not installed (Debian's package prometheus)")
	}
	var d dashboard
	b, err := os.ReadFile("dashboard.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &d))
	require.NotEmpty(t, d.Panels)

	dir := t.TempDir()
	exe := filepath.Join(dir, "example")
	build := exec.Command("go", "build", "-o", exe, "./example")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	// Two processes: one with a shadow rule and lanes, one whose quota
	// a thousand merchants share (lanes and tenants do not combine).
	lanesAddr, tenantsAddr, promAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	start(t, exe, "-metrics", lanesAddr, "-duration", "2m", "-shadow", "40", "-lanes")
	start(t, exe, "-metrics", tenantsAddr, "-duration", "2m", "-tenants", "1000")
	waitHTTP(t, "http://"+lanesAddr+"/metrics")
	waitHTTP(t, "http://"+tenantsAddr+"/metrics")

	config := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: throttle
    static_configs:
      - targets: [%q, %q]
`, lanesAddr, tenantsAddr)), 0o600))
	start(t, promBin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	waitHTTP(t, "http://"+promAddr+"/-/ready")

	// Grafana's variables: every rule, and a rate window of a few scrapes.
	vars := strings.NewReplacer("$__rate_interval", "10s", "$rule", ".*")
	pending := map[string]string{} // query → panel
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			pending[vars.Replace(tg.Expr)] = p.Title
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		for q := range pending {
			if n := finiteSamples(t, promAddr, q); n > 0 {
				delete(pending, q)
			}
		}
		time.Sleep(time.Second)
	}
	for q, panel := range pending {
		t.Errorf("panel %q: no data for %s", panel, q)
	}
}

// finiteSamples runs an instant query and counts its samples with a finite
// value.
func finiteSamples(t *testing.T, addr, query string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(query))
	require.NoError(t, err)
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	require.Equal(t, "success", r.Status, "%s: %s", query, r.Error)
	n := 0
	for _, s := range r.Data.Result {
		v, ok := s.Value[1].(string)
		if f, err := strconv.ParseFloat(v, 64); ok && err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			n++
		}
	}
	return n
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// start starts a program for the test, and kills it at its end.
func start(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// waitHTTP waits until u answers 200.
func waitHTTP(t *testing.T, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not answer in time", u)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
