package throttle_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/fakeapi"
	"github.com/throttle-go/throttle/profiles"
)

// served calls h in the process, as a base transport: the whole response is
// written, and the upstream's settlement made, before the caller reads it.
func served(h http.Handler) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		resp := rec.Result()
		resp.Request = r
		return resp, nil
	})
}

// openAIEstimate is prompt + max_tokens, what the fake charges on arrival.
func openAIEstimate(r *http.Request) int {
	body, err := r.GetBody()
	if err != nil {
		return -1
	}
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens int `json:"max_tokens"`
	}
	if json.NewDecoder(body).Decode(&req) != nil {
		return -1
	}
	n := req.MaxTokens
	for _, m := range req.Messages {
		n += fakeapi.PromptTokens(m.Content)
	}
	return n
}

// TestSettleAgainstOpenAIFake runs four workers for five minutes of the
// synctest clock against the OpenAI fake, the TPM binding. Against an API
// that refunds at the end of a response, settling meets no 429; against
// one that keeps the estimate counted (NoRefund), settling counts fewer
// tokens than the API and meets 429s, so a user must not set Rule.Actual
// there; without it, the estimate alone meets none.
func TestSettleAgainstOpenAIFake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		noRefund, settle bool
		want429          bool
	}{
		{"refunding API, settled", false, true, false},
		{"refunding API, estimate kept", false, false, false},
		{"API without refunds, estimate kept", true, false, false},
		{"API without refunds, settled", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				fake, err := fakeapi.NewOpenAI(fakeapi.OpenAIConfig{RPM: 100, TPM: 6000,
					NoRefund: tc.noRefund, TokenTime: 20 * time.Millisecond, Seed: 1})
				require.NoError(t, err)
				r := throttle.Rule{
					Host: "api.openai.com", Key: throttle.ByBearerToken(), MaxWait: time.Hour,
					Limits: []throttle.Limit{throttle.PerMinute(100), throttle.PerMinute(6000).Of("tokens")},
					Costs:  map[string]func(*http.Request) int{"tokens": openAIEstimate},
				}
				if tc.settle {
					r.Actual = profiles.OpenAIUsage("tokens")
				}
				tr, err := throttle.New(served(fake), newMemory(t), throttle.WithRule(r))
				require.NoError(t, err)
				c := &http.Client{Transport: tr}

				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				var wg sync.WaitGroup
				for w := range 4 {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(w), 0))
						for ctx.Err() == nil {
							body := fmt.Sprintf(`{"model":"m","max_tokens":400,"messages":[{"role":"user","content":%q}]}`,
								strings.Repeat("word", 50+rng.IntN(650)))
							req, err := http.NewRequestWithContext(ctx, http.MethodPost,
								"https://api.openai.com/v1/chat/completions", bytes.NewReader([]byte(body)))
							require.NoError(t, err)
							req.Header.Set("Authorization", "Bearer sk-test")
							resp, err := c.Do(req)
							if err != nil {
								var le *throttle.LimitError
								if !errors.As(err, &le) || !le.BeyondDeadline {
									t.Errorf("worker %d: %v", w, err)
								}
								return // the end of the run
							}
							_, _ = io.Copy(io.Discard, resp.Body)
							require.NoError(t, resp.Body.Close())
						}
					})
				}
				wg.Wait()
				s := fake.Stats()
				require.Greater(t, s.OK, 30, "the TPM binds: about 6000/800 a minute")
				t.Logf("%+v", s)
				assert.Zero(t, s.RequestsRefused)
				if tc.want429 {
					assert.Positive(t, s.TokensRefused, "settled below what the API counts")
				} else {
					assert.Zero(t, s.TokensRefused)
				}
			})
		})
	}
}
