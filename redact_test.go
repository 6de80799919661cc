package throttle_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

// TestRedactURLError: the error of http.Client for a request refused by the
// Transport holds the token of the query string in net/http's *url.Error;
// after RedactURLError, log.Print of it (wrapped or not) holds no token,
// and errors.Is and errors.As still see the refusal.
func TestRedactURLError(t *testing.T) {
	const token = "tok-NEVER-LOGGED"
	tr := newTransport(t, roundTripperFunc(func(r *http.Request) (*http.Response, error) { return okResponse(r), nil }), newMemory(t),
		throttle.WithRule(throttle.Rule{Name: "ig", Host: "graph.example", Key: throttle.ByQuery("access_token"),
			Limits: []throttle.Limit{throttle.PerHour(1)}, NoDefaultPace: true, FailFast: true}))
	client := &http.Client{Transport: tr}
	get := func() error {
		resp, err := client.Get("https://user:pw-SECRET@graph.example/me?fields=id&access_token=" + token)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, get())
	err := get()
	require.ErrorIs(t, err, throttle.ErrLimited)

	var logged bytes.Buffer
	logger := log.New(&logged, "", 0)
	logger.Print(err)
	assert.Contains(t, logged.String(), token, "net/http's *url.Error quotes the query: the reason for RedactURLError")

	for name, e := range map[string]error{"as returned": err, "wrapped": fmt.Errorf("fetch media: %w", err)} {
		t.Run(name, func(t *testing.T) {
			red := throttle.RedactURLError(e)
			logged.Reset()
			logger.Print(red)
			assert.NotContains(t, logged.String(), token)
			assert.NotContains(t, logged.String(), "pw-SECRET")
			assert.Contains(t, logged.String(), "graph.example/me?access_token=REDACTED&fields=REDACTED")
			assert.ErrorIs(t, red, throttle.ErrLimited)
			var le *throttle.LimitError
			assert.True(t, errors.As(red, &le))
			var ue *url.Error
			require.True(t, errors.As(red, &ue))
			assert.Equal(t, "Get", ue.Op)
		})
	}
	assert.Nil(t, throttle.RedactURLError(nil))
	plain := errors.New("no URL here")
	assert.Same(t, plain, throttle.RedactURLError(plain))
}
