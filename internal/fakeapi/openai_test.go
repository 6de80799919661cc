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

func chat(t *testing.T, h http.Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	return rec
}

// A prompt of 10 tokens and max_tokens 500 is charged 510 on arrival, then
// its usage; a third request in the window exceeds the RPM of 2.
func TestOpenAICharges(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, noRefund := range []bool{false, true} {
		o, err := fakeapi.NewOpenAI(fakeapi.OpenAIConfig{RPM: 2, TPM: 1000, NoRefund: noRefund, Now: func() time.Time { return now }})
		require.NoError(t, err)
		req := `{"model":"m","max_tokens":500,"messages":[{"role":"user","content":"` + strings.Repeat("word", 10) + `"}]}`
		rec := chat(t, o, req)
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "2", rec.Header().Get("x-ratelimit-limit-requests"))
		assert.Equal(t, "1000", rec.Header().Get("x-ratelimit-limit-tokens"))
		assert.Equal(t, "1", rec.Header().Get("x-ratelimit-remaining-requests"))
		assert.Equal(t, "490", rec.Header().Get("x-ratelimit-remaining-tokens"))
		assert.Equal(t, "1m0s", rec.Header().Get("x-ratelimit-reset-tokens"))
		var resp struct {
			Usage struct{ Prompt, Completion, Total int } `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(strings.ReplaceAll(rec.Body.String(), "_tokens", "")), &resp))
		u := resp.Usage
		assert.Equal(t, 10, u.Prompt)
		assert.GreaterOrEqual(t, u.Completion, 50, "at least 10 % of max_tokens")
		assert.LessOrEqual(t, u.Completion, 500)
		assert.Equal(t, u.Prompt+u.Completion, u.Total)
		want := u.Total
		if noRefund {
			want = 510
		}
		assert.Equal(t, want, o.Charged(now, now.Add(time.Second)))

		rec = chat(t, o, req)
		if noRefund {
			require.Equal(t, http.StatusTooManyRequests, rec.Code, "510 + 510 > 1000")
			assert.JSONEq(t, `{"error":{"message":"Rate limit reached for m in organization org-fake on tokens per min (TPM): Limit 1000, Used 510, Requested 510. Please try again in 1m0s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, rec.Body.String())
			assert.Equal(t, fakeapi.OpenAIStats{Requests: 2, OK: 1, TokensRefused: 1, Estimated: 510, Used: u.Total, First: now}, o.Stats())
			continue
		}
		require.Equal(t, http.StatusOK, rec.Code, "the refund made room")
		rec = chat(t, o, req)
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Contains(t, rec.Body.String(), `"type":"requests"`)
		assert.Equal(t, 1, o.Stats().RequestsRefused)
	}
}

// With stream and include_usage, the usage is in the last event before
// [DONE], whose choices is empty; the earlier chunks have "usage": null.
func TestOpenAIStreamUsage(t *testing.T) {
	o, err := fakeapi.NewOpenAI(fakeapi.OpenAIConfig{RPM: 10, TPM: 1000})
	require.NoError(t, err)
	rec := chat(t, o, `{"model":"m","max_tokens":20,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"abcd"}]}`)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	events := strings.Split(strings.TrimSpace(rec.Body.String()), "\n\n")
	require.Greater(t, len(events), 2)
	assert.Equal(t, "data: [DONE]", events[len(events)-1])
	assert.Contains(t, events[0], `"usage":null`)
	last := events[len(events)-2]
	assert.Contains(t, last, `"choices":[]`)
	assert.Contains(t, last, `"prompt_tokens":1`)
}
