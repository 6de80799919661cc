package upstream

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
)

func TestContainsWord(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body, word string
		want       bool
	}{
		{`{"status":"OVER_QUERY_LIMIT"}`, "OVER_QUERY_LIMIT", true},
		{`<Code>RequestLimitExceeded</Code>`, "RequestLimitExceeded", true},
		{`{"__type":"com.amazonaws#ThrottlingException"}`, "ThrottlingException", true},
		{`OVER_QUERY_LIMIT`, "OVER_QUERY_LIMIT", true},
		{`NOT_OVER_QUERY_LIMIT`, "OVER_QUERY_LIMIT", false},
		{`OVER_QUERY_LIMITS then OVER_QUERY_LIMIT.`, "OVER_QUERY_LIMIT", true},
		{`exceeded a secondary rate limit.`, "secondary rate limit", true},
		{`ratelimit`, "RATELIMIT", false},
		{``, "RATELIMIT", false},
	} {
		assert.Equal(t, c.want, containsWord([]byte(c.body), c.word), "%q in %q", c.word, c.body)
	}
}

func TestMatchCheck(t *testing.T) {
	t.Parallel()
	for _, m := range []Match{{Status: 403}, {Header: "Retry-After"}, {Header: "X-RateLimit-Remaining", Value: "0"}, {Body: "lock_timeout"}} {
		assert.NoError(t, m.Check(), "%+v", m)
	}
	for _, m := range []Match{{}, {Status: 99}, {Status: 600}, {Value: "0"}, {Header: "a b"}, {Header: "a:b"}, {Body: " x"}, {Body: strings.Repeat("x", 257)}} {
		assert.Error(t, m.Check(), "%+v", m)
	}
}

// The peeked body reads as the original would, through every reader the
// standard library tests with, at every length around the peek's.
func TestPeekReplays(t *testing.T) {
	t.Parallel()
	d := New(nil, 0, []Match{{Body: "CODE"}}, nil)
	for _, n := range []int{0, 1, PeekLimit - 1, PeekLimit, PeekLimit + 1, 3 * PeekLimit} {
		body := bytes.Repeat([]byte("ab"), n)[:n]
		resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body))}
		assert.False(t, d.refused(resp))
		if err := iotest.TestReader(resp.Body, body); err != nil {
			t.Errorf("a body of %d: %v", n, err)
		}
	}
	// No body, or none to read: nothing peeked, nothing replaced.
	for _, resp := range []*http.Response{{StatusCode: 200, Body: http.NoBody}, {StatusCode: 204, Body: io.NopCloser(strings.NewReader("CODE"))}} {
		before := resp.Body
		assert.False(t, d.refused(resp))
		assert.Equal(t, before, resp.Body)
	}
}

func FuzzPeek(f *testing.F) {
	f.Add([]byte(`{"status":"OVER_QUERY_LIMIT"}`), "OVER_QUERY_LIMIT", 200)
	f.Add([]byte{}, "x", 403)
	f.Fuzz(func(t *testing.T, body []byte, word string, status int) {
		m := Match{Status: status, Body: word}
		if m.Check() != nil {
			return
		}
		d := New(nil, 0, []Match{m}, nil)
		resp := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body))}
		got := d.refused(resp)
		read, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(read, body) {
			t.Fatalf("the body changed: %q, %v", read, err)
		}
		peeked := body[:min(len(body), PeekLimit)]
		if word != "" && status != 429 && status >= 200 && status != 204 && status != 304 && got != containsWord(peeked, word) {
			t.Fatalf("refused %v for %q in %q", got, word, peeked)
		}
	})
}
