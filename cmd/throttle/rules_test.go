package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

// fleetProcess is one process of a fleet: a Transport on its own client of
// srv's Redis, under prefix, with rule, sending to a fake upstream.
func fleetProcess(t *testing.T, url, prefix string, rule throttle.Rule, opts ...throttle.Option) *http.Client {
	st, client, err := store.NewRedisURL(url, store.WithPrefix(prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	ok := roundTripper(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r, Header: http.Header{}}, nil
	})
	tr, err := throttle.New(ok, st, append(opts, throttle.WithRule(rule))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return &http.Client{Transport: tr}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// published waits until n processes publish (a publish runs beside the
// request that triggers it).
func published(t *testing.T, url, prefix string, n int) string {
	var out string
	require.Eventually(t, func() bool {
		_, out, _ = runCLI("rules", "-redis", url, "-prefix", prefix)
		return strings.Contains(out, fmt.Sprintf("%d processes:", n))
	}, 5*time.Second, 10*time.Millisecond)
	return out
}

// TestUsagePublished: a fleet's Transport publishes its rule; `throttle
// usage -rule R -token-file F -secret-file S` needs nothing else, says it
// used the published definition and reads the key's state exactly; a wrong
// key says "no state" and fails; a forgotten -secret-file, or a -by the rule
// does not key by, is refused; a -limit that differs is warned of; reset of
// a wrong key deletes nothing and fails.
func TestUsagePublished(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	prefix := fmt.Sprintf("pub%d:", time.Now().UnixNano())
	const token = "tok-PUBLISHED-1"
	dir := t.TempDir()
	tokenFile, secretFile := filepath.Join(dir, "token"), filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	require.NoError(t, os.WriteFile(secretFile, []byte("0123456789abcdef0123456789abcdef"), 0o600))
	rule := throttle.Rule{Name: "ig", Host: "graph.example", Key: throttle.ByQuery("access_token"),
		Limits: []throttle.Limit{throttle.PerMinute(20)}, NoDefaultPace: true, MaxWait: time.Minute}
	c := fleetProcess(t, url, prefix, rule, throttle.WithKeySecret([]byte("0123456789abcdef0123456789abcdef")))
	for range 7 {
		resp, err := c.Get("https://graph.example/me?access_token=" + token)
		require.NoError(t, err)
		resp.Body.Close()
	}
	out := published(t, url, prefix, 1)
	assert.Contains(t, out, "ig: 20/1m log margin 5ms no-default-pace key query:access_token (secret) (1 of 1 processes)")
	assert.NotContains(t, out, token)

	args := []string{"usage", "-redis", url, "-prefix", prefix, "-rule", "ig"}
	code, out, errOut := runCLI(append(args, "-token-file", tokenFile, "-secret-file", secretFile)...)
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `(?m)^definition: published by 1 process, last at `, out)
	// Seven sent: counted as used, or as reserved while their entries,
	// placed a lateness allowance after their slots, are still ahead.
	m := regexp.MustCompile(`(?m)^\s+20/1m\s+1m0.005s\s+(\d+)/20\s+(\d+)$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	used, _ := strconv.Atoi(m[1])
	reserved, _ := strconv.Atoi(m[2])
	assert.Equal(t, 7, used+reserved, out)
	assert.NotContains(t, out, "warn")

	// A wrong key: no state, said plainly.
	code, out, _ = runCLI(append(args, "-key", "query:access_token:0123", "-secret-file", secretFile)...)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, out, "no state under "+prefix+"{ig:")
	assert.NotContains(t, out, "next free slot")
	// A forgotten -secret-file, a -by the rule does not key by.
	code, _, errOut = runCLI(append(args, "-token-file", tokenFile)...)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "rule ig HMACs its keys (WithKeySecret): give -secret-file")
	code, _, errOut = runCLI(append(args, "-token-file", tokenFile, "-secret-file", secretFile, "-by", "bearer")...)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "rule ig keys by query:access_token, not -by bearer")
	// A -limit that differs from the published one is used, and warned of.
	code, out, errOut = runCLI(append(args, "-token-file", tokenFile, "-secret-file", secretFile, "-limit", "50/1s")...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "definition: given on the command line\n")
	assert.Contains(t, out, "warn: the processes publish rule ig as 20/1m log margin 5ms no-default-pace key query:access_token (secret), not 50/1s log margin 5ms")
	// A misspelt rule.
	code, _, errOut = runCLI("usage", "-redis", url, "-prefix", prefix, "-rule", "gi", "-key", "k")
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut, "no running process publishes rule gi")
	// reset of a wrong key deletes nothing and fails.
	code, out, _ = runCLI("reset", "-redis", url, "-prefix", prefix, "-rule", "ig", "-key", "query:access_token:0123", "-secret-file", secretFile, "-yes")
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, out, "; nothing deleted")
}

// TestRulesCommand: two processes that disagree on a rule are listed, with
// a warning and exit 1; a Transport's Close removes its record.
func TestRulesCommand(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	prefix := fmt.Sprintf("rules%d:", time.Now().UnixNano())
	code, out, _ := runCLI("rules", "-redis", url, "-prefix", prefix)
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "no process publishes its rules here")

	rule := throttle.Rule{Name: "pg", Host: "pg.example", Key: throttle.Fixed("pg1"), Limits: []throttle.Limit{throttle.PerSecond(100)}}
	a := fleetProcess(t, url, prefix, rule)
	rule.Limits = []throttle.Limit{throttle.PerSecond(50)}
	st, client, err := store.NewRedisURL(url, store.WithPrefix(prefix))
	require.NoError(t, err)
	defer client.Close()
	tr, err := throttle.New(roundTripper(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	}), st, throttle.WithRule(rule))
	require.NoError(t, err)
	for _, c := range []*http.Client{a, {Transport: tr}} {
		resp, err := c.Get("https://pg.example/charge")
		require.NoError(t, err)
		resp.Body.Close()
	}
	published(t, url, prefix, 2)
	code, out, _ = runCLI("rules", "-redis", url, "-prefix", prefix)
	assert.Equal(t, exitFailed, code, out)
	assert.Contains(t, out, "pg: 100/1s log margin 5ms key custom (1 of 2 processes)")
	assert.Contains(t, out, "pg: 50/1s log margin 5ms key custom (1 of 2 processes)")
	assert.Contains(t, out, "warn: the processes disagree on rule pg")

	code, out, _ = runCLI("usage", "-redis", url, "-prefix", prefix, "-rule", "pg", "-key", "pg1")
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "definition: published by 2 processes")
	assert.Contains(t, out, "warn: the processes disagree on rule pg")

	require.NoError(t, tr.Close())
	require.NoError(t, tr.Close(), "idempotent")
	code, out, _ = runCLI("rules", "-redis", url, "-prefix", prefix)
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "1 processes:")
	_ = context.Background
}
