package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestSetCommand: throttle set lowers a published rule's limit, refuses a
// raise (exit 2) and a rule no process publishes; the process honours the
// override at a request a second later and publishes it; usage reads the
// key under it; -clear removes it; -history lists who changed what.
func TestSetCommand(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	prefix := fmt.Sprintf("set%d:", time.Now().UnixNano())
	rule := throttle.Rule{Name: "pg", Host: "pg.example", Key: throttle.Fixed("pg1"), Limits: []throttle.Limit{throttle.PerSecond(100), throttle.PerHour(5000)}}
	c := fleetProcess(t, url, prefix, rule)
	get := func() {
		resp, err := c.Get("https://pg.example/charge")
		require.NoError(t, err)
		resp.Body.Close()
	}
	cli := func(args ...string) (int, string, string) {
		return runCLI(append([]string{"set", "-redis", url, "-prefix", prefix}, args...)...)
	}
	code, _, errOut := cli("pg", "50/1s", "5000/1h")
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, errOut, "no running process publishes it")

	get()
	published(t, url, prefix, 1)
	code, _, errOut = cli("pg", "200/1s", "5000/1h")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "limit 1 (200/1s) would raise the rule's 100/1s")
	code, _, errOut = cli("pg", "50/1s")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "the rule has 2 limits (100/1s 5000/1h): give 2, in that order")

	code, out, errOut := cli("pg", "50/1s", "5000/1h", "-by", "alice")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "rule pg: limits 50/1s 5000/1h until cleared, by alice")

	// The process polls at a request a second after its last poll, then
	// publishes the override it runs with at its next.
	require.Eventually(t, func() bool {
		get()
		_, out, _ = cli("pg")
		return strings.Contains(out, "1 of 1 processes publishing the rule run with it")
	}, 5*time.Second, 100*time.Millisecond)
	assert.Contains(t, out, "rule pg: override 50/1s 5000/1h until cleared, set by alice")
	_, out, _ = runCLI("rules", "-redis", url, "-prefix", prefix)
	assert.Contains(t, out, "override 50/1s 5000/1h (throttle set)")
	code, out, _ = runCLI("usage", "-redis", url, "-prefix", prefix, "-rule", "pg", "-key", "pg1")
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "with the override 50/1s 5000/1h (throttle set pg)")
	assert.Contains(t, out, "50/1s")

	code, out, _ = cli("pg", "-clear", "-by", "bob")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "rule pg: override 50/1s 5000/1h cleared")
	code, out, _ = cli("-history", "pg")
	require.Equal(t, exitOK, code)
	assert.Regexp(t, `cleared by bob: 50/1s 5000/1h -> 100/1s 5000/1h\n.*set by alice: 100/1s 5000/1h -> 50/1s 5000/1h\n$`, out)
	code, out, _ = cli("pg")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "rule pg: no override")

	code, _, _ = cli("pg", "-for", "1h")
	assert.Equal(t, exitUsage, code, "-for without limits")
	code, _, _ = cli("pg", "50/1s", "-clear")
	assert.Equal(t, exitUsage, code)
}
