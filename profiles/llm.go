package profiles

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/throttle-go/throttle"
)

// OpenAI returns the rule of OpenAI's API (api.openai.com) for an API key:
// rpm requests and tpm tokens per minute, the tokens a unit of their own
// ("tokens"). A request is estimated, before it is sent, at what OpenAI
// counts when it arrives, an upper bound of the tokens it will use: its
// messages' characters over four plus max_tokens (or max_completion_tokens);
// the body is read through GetBody, so a request without one (a body not
// made by http.NewRequest from bytes or a string) fails with
// throttle.ErrInvalidCost, and a request without a body costs no tokens. The estimate stays counted for the whole minute:
// to give back what a response did not use, set Actual to
// profiles.OpenAIUsage("tokens"), but only against an API that gives it
// back too (docs/costs.md). Documented at platform.openai.com, "Rate
// limits" (the limits per model and tier, and "your rate limit is
// calculated as the maximum of max_tokens and the estimated number of
// tokens based on the character count of your request"), as of 2026-06.
func OpenAI(rpm, tpm int) throttle.Rule {
	return throttle.Rule{
		Name:       "openai",
		Host:       "api.openai.com",
		PathPrefix: "/v1/",
		Key:        throttle.ByBearerToken(),
		Limits:     []throttle.Limit{throttle.PerMinute(rpm), throttle.PerMinute(tpm).Of("tokens")},
		Costs:      map[string]func(*http.Request) int{"tokens": openAITokens},
	}
}

// Anthropic returns the rule of Anthropic's Messages API
// (api.anthropic.com) for an API key (x-api-key): rpm requests a minute,
// and itpm input and otpm output tokens a minute as token buckets
// replenished continuously up to their limit (paced units "input" and
// "output", each with a burst of its whole minute). A request is estimated
// at its messages' and system prompt's characters over four (input) and
// max_tokens (output), read through GetBody as for OpenAI; to settle them
// to the response's usage, set Actual to
// profiles.AnthropicUsage("input", "output") against an API that counts
// what was used. Documented at docs.anthropic.com, "Rate limits" (RPM,
// ITPM and OTPM per model, the token bucket), as of 2026-06.
func Anthropic(rpm, itpm, otpm int) throttle.Rule {
	return throttle.Rule{
		Name:       "anthropic",
		Host:       "api.anthropic.com",
		PathPrefix: "/v1/",
		Key:        throttle.ByHeader("X-Api-Key"),
		Limits: []throttle.Limit{throttle.PerMinute(rpm),
			throttle.Paced(itpm, time.Minute, itpm-1).Of("input"),
			throttle.Paced(otpm, time.Minute, otpm-1).Of("output")},
		Costs: map[string]func(*http.Request) int{
			"input":  func(r *http.Request) int { return llmEstimate(r).input },
			"output": func(r *http.Request) int { return llmEstimate(r).output },
		},
	}
}

// openAITokens is OpenAI's count of a request's tokens on its arrival, or
// -1 (an invalid cost) when the body cannot be read again.
func openAITokens(r *http.Request) int {
	e := llmEstimate(r)
	if e.input < 0 {
		return -1
	}
	return e.input + e.output
}

// maxLLMBody bounds what an estimate reads of a request's body.
const maxLLMBody = 32 << 20

// estimate is a request's tokens: input, each message's characters over
// four, rounded up (about a token each, as OpenAI's own estimate counts them); output, the
// most the model may generate. input is -1 when the body cannot be read.
type estimate struct{ input, output int }

// llmEstimate reads a chat request's body again (GetBody) and estimates
// its tokens. Message contents may be strings or arrays of blocks; only
// their text counts as characters, and a body it cannot parse counts whole.
func llmEstimate(r *http.Request) estimate {
	if r.Body == nil || r.Body == http.NoBody {
		return estimate{} // a GET of models, a file: no tokens
	}
	if r.GetBody == nil {
		return estimate{-1, -1}
	}
	body, err := r.GetBody()
	if err != nil {
		return estimate{-1, -1}
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, maxLLMBody))
	if err != nil {
		return estimate{-1, -1}
	}
	var req struct {
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		MaxTokens           int `json:"max_tokens"`
		MaxCompletionTokens int `json:"max_completion_tokens"`
	}
	if json.Unmarshal(raw, &req) != nil {
		return estimate{(len(raw) + 3) / 4, 0}
	}
	input := (textLen(req.System) + 3) / 4
	for _, m := range req.Messages {
		input += (textLen(m.Content) + 3) / 4 // each message rounded up
	}
	return estimate{input, max(req.MaxTokens, req.MaxCompletionTokens, 0)}
}

// textLen is the length of the text in a content value: a string, or an
// array of blocks whose "text" members count; anything else counts whole.
func textLen(v json.RawMessage) int {
	if len(v) == 0 || string(v) == "null" {
		return 0
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return len(s)
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(v, &blocks) == nil {
		n := 0
		for _, b := range blocks {
			n += len(b.Text)
		}
		return n
	}
	return len(v)
}
