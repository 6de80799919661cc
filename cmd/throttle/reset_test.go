package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
)

// reset on a live key: the upstream still counts what was sent, so the
// key's next reservation waits out the window, and the command says so;
// -feedback lifts a pause and keeps the sends.
func TestResetLiveKeyWaitsAWindow(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	rule := fmt.Sprintf("resetlive%d", time.Now().UnixNano())
	st, err := redisAdmin(srv.Client(t))
	require.NoError(t, err)
	key := rule + ":pg1"
	r := contract.Request{Limits: []contract.Limit{{N: 10, Per: time.Minute}}, Cost: 1, MaxWait: 2 * time.Minute}
	reserve := func() contract.Reservation {
		res, err := st.Reserve(context.Background(), key, r)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		return res
	}
	require.Zero(t, reserve().Delay)
	require.NoError(t, st.Pause(context.Background(), key, time.Minute))
	args := []string{"reset", "-redis", url, "-rule", rule, "-limit", "10/1m", "-key", "pg1", "-yes"}

	code, out, errOut := runCLI(append(args, "-feedback")...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "deleted 1 Redis keys")
	assert.Contains(t, out, "the sends stay counted")
	res := reserve()
	assert.Less(t, res.Delay, 50*time.Second, "the pause is gone")
	assert.Equal(t, contract.CauseNone, res.Cause)

	code, out, errOut = runCLI(args...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "a sliding log waits out one window")
	res = reserve()
	assert.Greater(t, res.Delay, 50*time.Second, "the next reservation waits out the window")
	assert.Contains(t, out, "\ndeleted ", "after the definition it used")
}

// reset -feedback forgets a learned margin and pace too: usage shows them
// before, not after, and the key's next slot at a window's edge is the
// rule's own again.
func TestResetFeedbackForgetsMargin(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	rule := fmt.Sprintf("resetmargin%d", time.Now().UnixNano())
	st, err := redisAdmin(srv.Client(t))
	require.NoError(t, err)
	key := rule + ":pg1"
	r := contract.Request{Limits: []contract.Limit{{N: 1, Per: time.Minute}}, Cost: 1, MaxWait: 2 * time.Minute}
	res, err := st.Reserve(context.Background(), key, r)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.NoError(t, st.Learn(context.Background(), key, contract.Learned{Margin: 30 * time.Second, MarginTTL: time.Hour, MarginCap: 30 * time.Second,
		Pace: contract.Limit{N: 1, Per: time.Second, Paced: true}, PaceTTL: time.Hour}))
	args := []string{"-redis", url, "-rule", rule, "-limit", "1/1m", "-margin", "0", "-no-default-pace", "-key", "pg1"}

	code, out, errOut := runCLI(append([]string{"usage"}, args...)...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "learned margin: windows 30s wider than the rule's, for ")
	assert.Contains(t, out, "learned pace: one per 1s, 0 more at once")
	assert.Regexp(t, `(?m)^next free slot: in 1m(29|30)s \(limit 1/1m\)$`, out, "the window 30s wider")

	code, out, errOut = runCLI(append([]string{"reset", "-feedback", "-yes"}, args...)...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "deleted 1 Redis keys")

	code, out, errOut = runCLI(append([]string{"usage"}, args...)...)
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, out, "learned margin")
	assert.NotContains(t, out, "learned pace")
	assert.Regexp(t, `(?m)^next free slot: in \d+(\.\d+)?s \(limit 1/1m\)$`, out, "the rule's own window")
	res, err = st.Reserve(context.Background(), key, r)
	require.NoError(t, err)
	assert.Less(t, res.Delay, time.Minute, "the sends stay counted, under the rule's own window")
	assert.Greater(t, res.Delay, 50*time.Second)
}
