package examplekit_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/store"
)

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// drive runs 3 workers for 15s (fake time) through a throttle of 2 per 10s
// (failing fast or not), and returns what the Tally counted.
func drive(t *testing.T, failFast bool) examplekit.Counts {
	t.Helper()
	st, err := store.NewMemory()
	require.NoError(t, err)
	tally := examplekit.NewTally(nil)
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	})
	tr, err := throttle.New(base, st, throttle.WithOnDecision(tally.OnDecision), throttle.WithRule(throttle.Rule{
		Host: "api.example.com", Limits: []throttle.Limit{throttle.Per(2, 10*time.Second)}, FailFast: failFast, Margin: throttle.NoMargin,
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	tally.Drive(ctx, 3, func(ctx context.Context, _, _ int) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/", nil)
		require.NoError(t, err)
		return (&http.Client{Transport: tr}).Do(req)
	})
	return tally.Counts()
}

// TestTallyCut: in Wait mode the slots are at 0, 0, 10s and 10s, and each
// worker's next slot, at 20s, lies beyond the load's end at 15s: the
// throttle refuses it at once (LimitError.BeyondDeadline), and the Tally
// counts it as cut by the end, not as limited. With FailFast every
// refusal is one by the limit, even near the end.
func TestTallyCut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := drive(t, false)
		assert.Equal(t, "sent=4 ok=4 429=0 limited=0 cut=3 errors=0 wait_p50=0s wait_p99=10s", c.String())
	})
	synctest.Test(t, func(t *testing.T) {
		c := drive(t, true)
		assert.Equal(t, "sent=4 ok=4 429=0 limited=6 cut=0 errors=0 wait_p50=0s wait_p99=0s", c.String())
	})
}
