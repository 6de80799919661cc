package throttle_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

func TestPacedConstructor(t *testing.T) {
	t.Parallel()
	assert.Equal(t, throttle.Limit{N: 100, Per: time.Second, Paced: true, Burst: 10}, throttle.Paced(100, time.Second, 10))
	assert.Equal(t, "100/1s paced+10", throttle.Paced(100, time.Second, 10).String())
	assert.Equal(t, "100/1s paced", throttle.Paced(100, time.Second, 0).String())
}

// TestPacedRuleConfig: what the store would refuse on every request fails at
// construction, as a *ConfigError naming the rule.
func TestPacedRuleConfig(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		limits []throttle.Limit
		alg    throttle.Algorithm
		want   string
	}{
		"under fixed":         {[]throttle.Limit{throttle.Paced(10, time.Second, 0)}, throttle.FixedWindow, "needs the log algorithm"},
		"two paced":           {[]throttle.Limit{throttle.Paced(10, time.Second, 0), throttle.Paced(100, time.Minute, 0)}, 0, "more than one paced limit"},
		"burst above N":       {[]throttle.Limit{throttle.Paced(10, time.Second, 11)}, 0, "Burst must be from 0 to N"},
		"negative burst":      {[]throttle.Limit{throttle.Paced(10, time.Second, -1)}, 0, "Burst must be from 0 to N"},
		"burst, no pace":      {[]throttle.Limit{{N: 10, Per: time.Second, Burst: 1}}, 0, "Burst and SlowStart are for a paced limit"},
		"slow start, no pace": {[]throttle.Limit{{N: 10, Per: time.Second, SlowStart: true}}, 0, "Burst and SlowStart are for a paced limit"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := throttle.New(nil, newMemory(t), throttle.WithRule(throttle.Rule{Name: "r", Host: "a.example", Limits: tc.limits, Algorithm: tc.alg}))
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "r", ce.Rule)
			assert.Contains(t, ce.Reason, tc.want)
		})
	}
}

// TestPacedRule: a rule with a paced limit sends one every (Per + Margin)/N
// (the margin paid once per window, not per slot), after its burst; a cost
// above the burst plus one is refused as an invalid cost.
func TestPacedRule(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		tr := newTransport(t, sent.base(), nil, throttle.WithRule(throttle.Rule{
			Host: "api.example.com", Limits: []throttle.Limit{throttle.PerMinute(1000), throttle.Paced(100, time.Second, 2)},
			Margin: 10 * time.Millisecond,
			Cost: func(r *http.Request) int {
				if r.URL.Path == "/big" {
					return 4
				}
				return 1
			},
		}))
		start := time.Now()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				req, err := http.NewRequest(http.MethodGet, "https://api.example.com/x", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				resp.Body.Close()
			})
			synctest.Wait() // reserve in order
		}
		wg.Wait()
		var got []time.Duration
		for _, at := range sent.times {
			got = append(got, at.Sub(start))
		}
		step := 10100 * time.Microsecond // (1s + 10ms) / 100
		assert.Equal(t, []time.Duration{0, 0, 0, step, 2 * step, 3 * step, 4 * step, 5 * step}, got)

		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://api.example.com/big", nil)
		require.NoError(t, err)
		_, err = tr.RoundTrip(req)
		assert.ErrorIs(t, err, throttle.ErrInvalidCost, "a cost of 4 exceeds the burst of 2 plus one")
	})
}
