package throttle_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/profiles"
)

// TestGraphQLCosts: a query reserves 50 points, and is settled to what the
// answer says it cost, read from the body as the caller reads it.
func TestGraphQLCosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		actual throttle.Actual
		body   string
		want   []int64 // the settlement, none if nil
	}{
		{"GitHub rateLimit", profiles.GitHubGraphQLCost("points"),
			`{"data":{"viewer":{"login":"octocat"},"rateLimit":{"cost":1,"remaining":4999,"resetAt":"2026-01-01T00:00:00Z"}}}`,
			[]int64{1}},
		{"GitHub query without rateLimit", profiles.GitHubGraphQLCost("points"),
			`{"data":{"viewer":{"login":"octocat"}}}`, nil},
		{"Shopify extensions.cost, after a product's own cost", profiles.ShopifyGraphQLCost("points"),
			`{"data":{"product":{"cost":{"amount":"5.00"}}},"extensions":{"cost":{"requestedQueryCost":52,"actualQueryCost":12,` +
				`"throttleStatus":{"maximumAvailable":2000.0,"currentlyAvailable":1988.0,"restoreRate":100.0}}}}`,
			[]int64{12}},
		{"Shopify THROTTLED costs nothing", profiles.ShopifyGraphQLCost("points"),
			`{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":52,"actualQueryCost":null,` +
				`"throttleStatus":{"maximumAvailable":2000.0,"currentlyAvailable":40.0,"restoreRate":100.0}}}}`,
			[]int64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &settleCount{Store: newMemory(t)}
			r := throttle.Rule{
				Host: "api.example.com", Key: throttle.Fixed("k"), FailFast: true, NoDefaultPace: true,
				Limits: []throttle.Limit{throttle.PerMinute(100), throttle.PerMinute(100).Of("points")},
				Costs:  map[string]func(*http.Request) int{"points": func(*http.Request) int { return 50 }},
				Actual: tc.actual,
			}
			tr, err := throttle.New(llmUpstream(tc.body, false, iotest.HalfReader), st, throttle.WithRule(r))
			require.NoError(t, err)
			c := &http.Client{Transport: tr}
			resp, err := c.Post("https://api.example.com/graphql", "application/json", strings.NewReader(`{"query":"{viewer{login}}"}`))
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, tc.body, string(got))
			if tc.want == nil {
				assert.Zero(t, st.n.Load(), "the estimate stands")
				return
			}
			assert.Equal(t, [][]int64{tc.want}, st.actual)
		})
	}
}
