package throttle_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestLaneStats: twenty backfill requests fill this second and the next; an
// interactive request at 50ms takes a backfill slot (lanes_test.go). Each
// lane counts its own sends, waits, takes and bumps, and the lanes add up to
// the rule.
func TestLaneStats(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var decisions decisionLog
		tr := newTransport(t, statusBase, nil, throttle.WithRule(laneRule(2)), decisions.option())
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() { send(t, tr, testURL) })
		}
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		req.Header.Set("X-Lane", "1")
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		wg.Wait()

		var delays [2][]time.Duration
		for _, d := range decisions.all() {
			require.Equal(t, throttle.Sent, d.Outcome)
			delays[d.Lane] = append(delays[d.Lane], d.Delay)
		}
		require.Len(t, delays[1], 1)
		require.Len(t, delays[0], 20)
		r := tr.Stats().Rules[0]
		require.Len(t, r.Lanes, 2)
		assert.Equal(t, throttle.LaneStats{Lane: 1, Sent: 1, Wait: waits(950 * time.Millisecond), Took: 1}, r.Lanes[1])
		assert.Equal(t, throttle.LaneStats{Lane: 0, Sent: 20, Wait: waits(delays[0]...), Bumped: 1}, r.Lanes[0])
		assert.Equal(t, uint64(10), r.Lanes[0].Wait.Counts[0], "half the backfill went at once")
		assert.Equal(t, r.Requests[throttle.Sent], r.Lanes[0].Sent+r.Lanes[1].Sent)
		assert.Equal(t, r.Wait.Sum, r.Lanes[0].Wait.Sum+r.Lanes[1].Wait.Sum)
		assert.Nil(t, r.Tenants)
		assert.Nil(t, tr.Stats().Total().Lanes)
	})
}

// TestLaneStatsLimited: a request of a lane refused by a limit is counted
// in its lane.
func TestLaneStatsLimited(t *testing.T) {
	t.Parallel()
	rule := laneRule(2)
	rule.FailFast = true
	tr := newTransport(t, statusBase, nil, throttle.WithRule(rule))
	for range 11 {
		_ = get(t, tr, context.Background(), testURL)
	}
	lanes := tr.Stats().Rules[0].Lanes
	assert.Equal(t, [2]uint64{10, 0}, [2]uint64{lanes[0].Sent, lanes[1].Sent})
	assert.Equal(t, [2]uint64{1, 0}, [2]uint64{lanes[0].Limited, lanes[1].Limited})
}

// manyTenants is a rule of a million per second whose tenant is the
// X-Customer header, as it is.
var manyTenants = throttle.Rule{
	Name: "saas", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerSecond(1 << 20)},
	Key: throttle.Fixed("gw"), Margin: throttle.NoMargin, NoDefaultPace: true,
	Tenant: func(r *http.Request) (string, error) { return r.Header.Get("X-Customer"), nil },
}

// sendTenants sends, through tr, one request of each of 1,000 light
// tenants, and after every tenth one a request of each heavy tenant: 100
// each.
func sendTenants(t *testing.T, tr http.RoundTripper, heavy ...string) {
	t.Helper()
	for i := range 1000 {
		sendAs(t, tr, fmt.Sprintf("light-%d", i))
		if i%10 == 9 {
			for _, h := range heavy {
				sendAs(t, tr, h)
			}
		}
	}
}

// TestTenantStatsKeepTheBusiest: of 1,003 tenants, three heavy ones sending
// a hundred requests each among a thousand that send one, RuleStats has the
// three heavy ones, the busiest first, seven light ones and the others' row:
// 11 rows; every request is counted once, in one row.
func TestTenantStatsKeepTheBusiest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tr := newTransport(t, statusBase, nil, throttle.WithRule(manyTenants))
		heavy := []string{"heavy-a", "heavy-b", "heavy-c"}
		sendTenants(t, tr, heavy...)

		r := tr.Stats().Rules[0]
		require.Len(t, r.Tenants, 11)
		var sent uint64
		for i, ts := range r.Tenants {
			sent += ts.Sent
			assert.Equal(t, i == 10, ts.Other, ts.Tenant)
			if i < 3 {
				assert.Contains(t, heavy, ts.Tenant)
				// Its fourth request, sure in the sketch, made it a row,
				// which counts from the fifth.
				assert.Equal(t, uint64(96), ts.Sent, ts.Tenant)
				assert.InDelta(t, 96.0/1300, ts.Share, 1e-9, ts.Tenant)
				assert.Equal(t, waits(make([]time.Duration, ts.Sent)...), ts.Wait)
			}
		}
		assert.Equal(t, "(other)", r.Tenants[10].Tenant)
		assert.Greater(t, r.Tenants[10].Sent, uint64(900))
		// The light tenants that gave their rows to the heavy ones took
		// their one request each with them.
		assert.Equal(t, uint64(1300-3), sent)
	})
}

// TestTenantStatsHashed: under WithKeySecret, a tenant is reported keyed, as
// keys are: no row holds its name.
func TestTenantStatsHashed(t *testing.T) {
	t.Parallel()
	tr := newTransport(t, statusBase, nil, throttle.WithRule(manyTenants), throttle.WithKeySecret([]byte("0123456789abcdef0123456789abcdef")))
	sendAs(t, tr, "customer-secret-1")
	sendAs(t, tr, "(other)")
	ts := tr.Stats().Rules[0].Tenants
	require.Len(t, ts, 3)
	for _, s := range ts[:2] {
		assert.True(t, strings.HasPrefix(s.Tenant, "hmac:"), s.Tenant)
	}
	assert.Equal(t, throttle.TenantStats{Tenant: "(other)", Other: true, Wait: waits()}, ts[2])
}
