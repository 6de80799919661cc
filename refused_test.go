package throttle_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// TestRefusedServerIsNotAnOutage: a Redis the store refuses (an evicting
// maxmemory-policy) answered; it is a configuration to fix, not an outage.
// Under every failure policy each request fails with an error that names
// the refusal, nothing is sent uncounted or counted locally, and the
// Decision says Failed; the refusal is never "not tried".
func TestRefusedServerIsNotAnOutage(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	for _, p := range []storePolicy{failClosed, failOpen, failLocal} {
		t.Run(string(p), func(t *testing.T) {
			st, err := store.NewRedis(srv.Client(t))
			require.NoError(t, err)
			var sent sendLog
			var decisions decisionLog
			tr := newTransport(t, sent.base(), st, append(p.options(0.5), decisions.option(),
				throttle.WithDefault(throttle.Rule{Name: "all", Key: throttle.ByHost(), Limits: []throttle.Limit{throttle.PerMinute(10)}}))...)
			for range 5 {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://a.example/x", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
				require.ErrorIs(t, err, store.ErrEvictingPolicy)
				require.ErrorIs(t, err, throttle.ErrStoreUnavailable)
				assert.Contains(t, err.Error(), "allkeys-lru")
			}
			assert.Equal(t, 0, sent.count(), "nothing sent")
			for _, d := range decisions.all() {
				assert.Equal(t, throttle.Failed, d.Outcome)
			}
			s := tr.Stats().Total()
			assert.Equal(t, uint64(5), s.Requests[throttle.Failed])
			assert.Zero(t, s.Requests[throttle.FailedOpen])
			assert.Zero(t, s.Requests[throttle.Sent])
		})
	}
}
