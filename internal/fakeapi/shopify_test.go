package fakeapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/fakeapi"
)

type shopifyAnswer struct {
	Errors []struct {
		Message    string
		Extensions struct{ Code string }
	}
	Extensions struct {
		Cost struct {
			RequestedQueryCost int
			ActualQueryCost    *int
			ThrottleStatus     struct{ MaximumAvailable, CurrentlyAvailable, RestoreRate float64 }
		}
	}
}

func query(t *testing.T, s http.Handler, first int) shopifyAnswer {
	t.Helper()
	rec := httptest.NewRecorder()
	body := `{"query":"query($first:Int!){products(first:$first){edges{node{id title}}}}","variables":{"first":` + itoa(first) + `}}`
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/admin/api/2025-01/graphql.json", strings.NewReader(body)))
	require.Equal(t, http.StatusOK, rec.Code, "throttled or not, a GraphQL answer is a 200")
	var a shopifyAnswer
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a))
	return a
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A bucket of 100 restored at 10 a second: a query of first 60 takes 62 and
// gives back the nodes it did not return; a query whose requested cost
// exceeds what is left is THROTTLED, costs nothing, and is counted.
func TestShopifyBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	s, err := fakeapi.NewShopify(fakeapi.ShopifyConfig{Bucket: 100, RestoreRate: 10, Now: func() time.Time { return now }})
	require.NoError(t, err)
	a := query(t, s, 60)
	require.Empty(t, a.Errors)
	c := a.Extensions.Cost
	assert.Equal(t, 62, c.RequestedQueryCost)
	require.NotNil(t, c.ActualQueryCost)
	actual := *c.ActualQueryCost
	assert.GreaterOrEqual(t, actual, 8, "at least 10 % of the nodes")
	assert.Equal(t, float64(100-actual), c.ThrottleStatus.CurrentlyAvailable)
	assert.Equal(t, 100.0, c.ThrottleStatus.MaximumAvailable)
	assert.Equal(t, 10.0, c.ThrottleStatus.RestoreRate)

	a = query(t, s, 100-actual) // requests 2 more than is left
	require.Len(t, a.Errors, 1)
	assert.Equal(t, "THROTTLED", a.Errors[0].Extensions.Code)
	assert.Nil(t, a.Extensions.Cost.ActualQueryCost)
	now = now.Add(200 * time.Millisecond) // 2 points restored
	a = query(t, s, 100-actual)
	assert.Empty(t, a.Errors)
	st := s.Stats()
	assert.Equal(t, 3, st.Queries)
	assert.Equal(t, 1, st.Throttled)
	assert.Equal(t, 62+102-actual, st.Requested)
}
