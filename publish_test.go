package throttle_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/operator"
)

// TestPublishedRules: a Transport publishes nothing before its first
// request (no I/O in New), then its rules, with the scheme of its keys and
// never a key; a Limiter publishes its rule; Close removes each record and
// is idempotent.
func TestPublishedRules(t *testing.T) {
	ctx := context.Background()
	st := newMemory(t)
	tr := newTransport(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil }), st,
		throttle.WithRule(throttle.Rule{Name: "ig", Host: "graph.example", Key: throttle.ByQuery("access_token"),
			Limits: []throttle.Limit{throttle.PerHour(5000)}, Margin: 20 * time.Millisecond}),
		throttle.WithDefault(throttle.Rule{Limits: []throttle.Limit{throttle.PerSecond(5)}}))
	ps, err := operator.Published(ctx, st)
	require.NoError(t, err)
	assert.Empty(t, ps, "nothing before the first request")

	send(t, tr, "https://graph.example/me?access_token=tok-NOT-PUBLISHED")
	ps, err = operator.Published(ctx, st)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, "transport", ps[0].Kind)
	require.Len(t, ps[0].Rules, 2)
	ig := ps[0].Rules[0]
	assert.Equal(t, operator.PublishedRule{Name: "ig", Match: "host graph.example", Limits: []throttle.Limit{throttle.PerHour(5000)},
		Algorithm: throttle.SlidingLog, Margin: 20 * time.Millisecond, Key: "query:access_token"}, ig)
	assert.Equal(t, "default", ps[0].Rules[1].Name)
	assert.Empty(t, ps[0].Rules[1].Key, "no request yet")

	lim, err := throttle.NewLimiter(st, throttle.Rule{Name: "orders", Limits: []throttle.Limit{throttle.PerSecond(50)}})
	require.NoError(t, err)
	require.NoError(t, lim.Wait(ctx, "queue:orders", 1))
	ps, err = operator.Published(ctx, st)
	require.NoError(t, err)
	require.Len(t, ps, 2)

	require.NoError(t, tr.Close())
	require.NoError(t, tr.Close())
	require.NoError(t, lim.Close())
	ps, err = operator.Published(ctx, st)
	require.NoError(t, err)
	assert.Empty(t, ps)
	send(t, tr, "https://graph.example/me?access_token=x") // still works, unpublished
	ps, err = operator.Published(ctx, st)
	require.NoError(t, err)
	assert.Empty(t, ps)
}
