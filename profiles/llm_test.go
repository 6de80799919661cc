package profiles_test

import (
	"bytes"
	"context"
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
	"github.com/throttle-go/throttle/store"
)

// TestLLMEstimates: the costs the LLM profiles reserve, from the body.
func TestLLMEstimates(t *testing.T) {
	t.Parallel()
	openai, anthropic := profiles.OpenAI(100, 1000).Costs, profiles.Anthropic(100, 1000, 1000).Costs
	for _, tc := range []struct {
		name, body          string
		tokens, input, outp int
	}{
		{"strings", `{"max_tokens":100,"messages":[{"role":"user","content":"abcdefgh"},{"role":"user","content":"a"}]}`, 103, 3, 100},
		{"blocks and a system prompt", `{"system":"abcd","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"abcdefgh"},{"type":"image"}]}]}`, 13, 3, 10},
		{"max_completion_tokens", `{"max_completion_tokens":50,"messages":[{"role":"user","content":"abcd"}]}`, 51, 1, 50},
		{"not JSON: the whole body", `not json at all!`, 4, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, "https://api.openai.com/v1/chat/completions", strings.NewReader(tc.body))
			require.NoError(t, err)
			assert.Equal(t, tc.tokens, openai["tokens"](req))
			assert.Equal(t, tc.input, anthropic["input"](req))
			assert.Equal(t, tc.outp, anthropic["output"](req))
		})
	}
	req, err := http.NewRequest(http.MethodPost, "https://api.openai.com/v1/chat/completions", io.NopCloser(strings.NewReader("{}")))
	require.NoError(t, err)
	assert.Equal(t, -1, openai["tokens"](req), "a body that cannot be read again")
}

// TestOpenAIProfileAgainstFake: the OpenAI profile, its limits scaled to the
// fake's, sends four workers for five minutes of the synctest clock: the
// TPM binds, the fake (which charges prompt + max_tokens on arrival) meets
// no 429, with and without settling to the usage.
func TestOpenAIProfileAgainstFake(t *testing.T) {
	t.Parallel()
	for _, settle := range []bool{false, true} {
		t.Run(fmt.Sprint("settle=", settle), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				fake, err := fakeapi.NewOpenAI(fakeapi.OpenAIConfig{RPM: 100, TPM: 6000, TokenTime: 20 * time.Millisecond, Seed: 1})
				require.NoError(t, err)
				r := profiles.OpenAI(100, 6000)
				r.MaxWait = time.Hour
				if settle {
					r.Actual = profiles.OpenAIUsage("tokens")
				}
				st, err := store.NewMemory()
				require.NoError(t, err)
				tr, err := throttle.New(inProcess(fake), st, throttle.WithRule(r))
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
				t.Logf("%+v", s)
				require.Greater(t, s.OK, 30, "the TPM binds: about 6000/800 a minute")
				assert.Zero(t, s.TooMany())
			})
		})
	}
}

// inProcess calls h as a base transport.
func inProcess(h http.Handler) http.RoundTripper {
	return rt(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		resp := rec.Result()
		resp.Request = r
		return resp, nil
	})
}

type rt func(*http.Request) (*http.Response, error)

func (f rt) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
