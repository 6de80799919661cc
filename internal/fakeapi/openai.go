package fakeapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What OpenAI documents, as read on 2026-06-26 (platform.openai.com/docs/
// guides/rate-limits, "Rate limits in headers" and "Error mitigation"):
//
//   - Limits are per minute (RPM, TPM; also per day, RPD and TPD, which
//     this fake leaves out), per organization or project and per model.
//   - "Your rate limit is calculated as the maximum of max_tokens and the
//     estimated number of tokens based on the character count of your
//     request": the tokens are counted when the request arrives, from
//     max_tokens and the prompt's characters, not from what the model
//     later generates. The guide leaves open whether the two are added;
//     this fake charges prompt + max_tokens, the larger reading, which
//     is also the sum an upper-bound estimate on the client makes. It
//     counts a prompt's tokens as OpenAI's tokenizer page rounds them: one
//     token per four characters (PromptTokens).
//   - Every response carries x-ratelimit-limit-requests,
//     x-ratelimit-limit-tokens, x-ratelimit-remaining-requests,
//     x-ratelimit-remaining-tokens, x-ratelimit-reset-requests and
//     x-ratelimit-reset-tokens: "the time until the rate limit ... resets
//     to its initial state", written as a Go duration (samples "1s",
//     "6m0s"; "20ms" is seen on the wire).
//   - A refused request is answered 429 with the error body
//     {"error":{"message":"Rate limit reached for … on tokens per min
//     (TPM): Limit …, Used …, Requested …. Please try again in …",
//     "type":"tokens","param":null,"code":"rate_limit_exceeded"}} ("type"
//     is "requests" for the RPM).
//   - The usage ({"prompt_tokens","completion_tokens","total_tokens"}) is
//     in the JSON body, or, with "stream": true and
//     "stream_options": {"include_usage": true}, in a last event whose
//     "choices" is empty (every earlier chunk has "usage": null).
//
// Whether OpenAI gives back, once the response ends, the tokens that
// max_tokens reserved and the model did not generate is not documented.
// This fake makes it a switch, OpenAIConfig.NoRefund: by default it settles
// each request's charge to its usage at the end of the response (a refund),
// which is what settling on the client (throttle's Rule.Actual) assumes;
// with NoRefund the estimate stays charged for the whole window.

// OpenAIConfig configures NewOpenAI.
type OpenAIConfig struct {
	// RPM and TPM are the requests and the tokens accepted in any window
	// of length Window, counted on arrival; both must be positive.
	RPM, TPM int
	// Window is the length of the window: a minute when zero. A test
	// scales it down with the limits.
	Window time.Duration
	// NoRefund keeps each request charged at its estimate (prompt +
	// max_tokens) for the whole window instead of settling it to its
	// usage when the response ends.
	NoRefund bool
	// TokenTime is how long the model takes to generate one output token:
	// a response of n tokens ends n·TokenTime after its arrival.
	TokenTime time.Duration
	// Transit is the longest random delay between a request's receipt and
	// its arrival at the limiter, as a network adds.
	Transit time.Duration
	// Seed seeds the output lengths and the transit delays.
	Seed uint64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// OpenAIStats are the counts of an OpenAI fake.
type OpenAIStats struct {
	// Requests counts the requests that reached the limiter.
	Requests int
	// OK counts the requests answered 200.
	OK int
	// RequestsRefused and TokensRefused count the 429s on the RPM and on
	// the TPM.
	RequestsRefused, TokensRefused int
	// Estimated sums the estimates (prompt + max_tokens) of the requests
	// answered 200, and Used the total_tokens of the usages sent.
	Estimated, Used int
	// First is the arrival of the first request answered 200.
	First time.Time
}

// TooMany counts every 429.
func (s OpenAIStats) TooMany() int { return s.RequestsRefused + s.TokensRefused }

// OpenAI is a fake OpenAI-compatible chat completions API,
// POST /v1/chat/completions, enforcing an RPM and a TPM on one sliding
// window of arrivals. It is an http.Handler, safe for concurrent use.
type OpenAI struct {
	cfg OpenAIConfig

	mu     sync.Mutex
	rng    *rand.Rand
	window []*charge // the accepted arrivals of the last Window, oldest first
	all    []*charge // every accepted arrival, for Charged
	stats  OpenAIStats
	next   int // the next completion id
}

// charge is one accepted request: when it arrived and what the TPM counts
// for it (its estimate, then its usage once settled).
type charge struct {
	at     time.Time
	tokens int
}

// NewOpenAI returns a fake OpenAI API.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.Window == 0 {
		cfg.Window = time.Minute
	}
	switch {
	case cfg.RPM < 1 || cfg.TPM < 1:
		return nil, fmt.Errorf("fakeapi: RPM and TPM must be positive, not %d and %d", cfg.RPM, cfg.TPM)
	case cfg.Window < time.Millisecond:
		return nil, fmt.Errorf("fakeapi: Window must be at least 1ms, not %s", cfg.Window)
	case cfg.TokenTime < 0 || cfg.Transit < 0:
		return nil, errors.New("fakeapi: TokenTime and Transit must not be negative")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &OpenAI{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 25))}, nil
}

// PromptTokens is the fake's count of a prompt's tokens: one per four
// bytes of each message's content, rounded up.
func PromptTokens(contents ...string) int {
	n := 0
	for _, c := range contents {
		n += (len(c) + 3) / 4
	}
	return n
}

// Stats returns the counts so far.
func (o *OpenAI) Stats() OpenAIStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stats
}

// Charged returns the tokens the TPM counts for the requests that arrived in
// [from, to): their usage once settled (their estimate with NoRefund, or
// while their response runs).
func (o *OpenAI) Charged(from, to time.Time) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.all {
		if !c.at.Before(from) && c.at.Before(to) {
			n += c.tokens
		}
	}
	return n
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	Stream              bool `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// ServeHTTP answers POST /v1/chat/completions. A request arrives when its
// headers have been read (and its transit delay has passed), before its body
// is decoded, so that the decoding's time on a loaded machine is not counted
// as the network's.
func (o *OpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	received := o.cfg.Now()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		apiError(w, http.StatusNotFound, "invalid_request_error", "", "Unknown request URL: "+r.Method+" "+r.URL.Path)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request.")
		return
	}
	maxTokens := req.MaxCompletionTokens
	if maxTokens == nil {
		maxTokens = req.MaxTokens
	}
	if maxTokens == nil || *maxTokens < 1 || len(req.Messages) == 0 {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "", "this fake needs messages and a positive max_tokens")
		return
	}
	contents := make([]string, len(req.Messages))
	for i, m := range req.Messages {
		contents[i] = m.Content
	}
	prompt := PromptTokens(contents...)
	estimate := prompt + *maxTokens

	o.mu.Lock()
	transit := o.draw(o.cfg.Transit)
	o.mu.Unlock()
	if !o.sleep(r, transit-o.cfg.Now().Sub(received)) {
		return
	}
	c, out, ok := o.admit(w, received.Add(transit), req.Model, estimate, *maxTokens)
	if !ok {
		return
	}
	if !o.sleep(r, time.Duration(out)*o.cfg.TokenTime) {
		return // the client left: the estimate stays charged
	}
	o.settle(c, estimate, prompt+out)

	usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}
	finish := "stop"
	if out == *maxTokens {
		finish = "length"
	}
	o.mu.Lock()
	o.next++
	id := "chatcmpl-fake" + strconv.Itoa(o.next)
	o.mu.Unlock()
	created := o.cfg.Now().Unix()
	text := strings.Repeat("lore", out) // four bytes a token
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
				"message": map[string]any{"role": "assistant", "content": text}}},
			"usage": usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	withUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	event := func(choices []any, usage any) {
		v := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model, "choices": choices}
		if withUsage {
			v["usage"] = usage
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	const pieces = 4
	for i := range pieces {
		piece := text[i*len(text)/pieces : (i+1)*len(text)/pieces]
		event([]any{map[string]any{"index": 0, "delta": map[string]any{"content": piece}, "finish_reason": nil}}, nil)
	}
	event([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}, nil)
	if withUsage {
		event([]any{}, usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// admit counts an arrival at now of estimate tokens: it charges it and
// returns its charge and output length, or answers 429. Arrivals are
// counted in the order they take o.mu, a moment apart at most.
func (o *OpenAI) admit(w http.ResponseWriter, now time.Time, model string, estimate, maxTokens int) (*charge, int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stats.Requests++
	for len(o.window) > 0 && !o.window[0].at.After(now.Add(-o.cfg.Window)) {
		o.window = o.window[1:]
	}
	n, used := 0, 0 // requests and tokens in the window (the log may be out of order by a moment)
	for _, c := range o.window {
		if c.at.After(now.Add(-o.cfg.Window)) {
			n++
			used += c.tokens
		}
	}
	h := w.Header()
	refuse := func(kind, per string, limit, used, requested int, reset time.Duration) {
		o.headers(h, now, used)
		msg := fmt.Sprintf("Rate limit reached for %s in organization org-fake on %s per min (%s): Limit %d, Used %d, Requested %d. Please try again in %s.",
			model, kind, per, limit, used, requested, reset.Round(time.Millisecond))
		apiError(w, http.StatusTooManyRequests, kind, "rate_limit_exceeded", msg)
	}
	switch {
	case n+1 > o.cfg.RPM:
		o.stats.RequestsRefused++
		refuse("requests", "RPM", o.cfg.RPM, n, 1, o.window[0].at.Add(o.cfg.Window).Sub(now))
		return nil, 0, false
	case used+estimate > o.cfg.TPM:
		o.stats.TokensRefused++
		refuse("tokens", "TPM", o.cfg.TPM, used, estimate, o.freed(now, used+estimate-o.cfg.TPM))
		return nil, 0, false
	}
	c := &charge{at: now, tokens: estimate}
	o.window = append(o.window, c)
	o.all = append(o.all, c)
	if o.stats.OK == 0 {
		o.stats.First = now
	}
	o.stats.OK++
	o.stats.Estimated += estimate
	lo := (maxTokens + 9) / 10
	out := lo + o.rng.IntN(maxTokens-lo+1)
	o.headers(h, now, used+estimate)
	return c, out, true
}

// settle counts a response's usage, and charges c its usage instead of its
// estimate unless NoRefund.
func (o *OpenAI) settle(c *charge, estimate, usage int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stats.Used += usage
	if !o.cfg.NoRefund {
		c.tokens += usage - estimate
	}
}

// freed returns how long until excess tokens of the window have left it;
// o.mu is held.
func (o *OpenAI) freed(now time.Time, excess int) time.Duration {
	for _, c := range o.window {
		if excess -= c.tokens; excess <= 0 {
			return c.at.Add(o.cfg.Window).Sub(now)
		}
	}
	return o.cfg.Window
}

// headers sets the x-ratelimit-* headers; o.mu is held.
func (o *OpenAI) headers(h http.Header, now time.Time, used int) {
	reset := func(tokens bool) string {
		for i := len(o.window) - 1; i >= 0; i-- {
			if !tokens || o.window[i].tokens > 0 {
				return o.window[i].at.Add(o.cfg.Window).Sub(now).Round(time.Millisecond).String()
			}
		}
		return "0s"
	}
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(o.cfg.RPM))
	h.Set("x-ratelimit-limit-tokens", strconv.Itoa(o.cfg.TPM))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(max(o.cfg.RPM-len(o.window), 0)))
	h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(max(o.cfg.TPM-used, 0)))
	h.Set("x-ratelimit-reset-requests", reset(false))
	h.Set("x-ratelimit-reset-tokens", reset(true))
}

// draw returns a random duration in [0, d]; o.mu is held.
func (o *OpenAI) draw(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(o.rng.Int64N(int64(d) + 1))
}

// sleep waits d, or until the request's context ends (false).
func (o *OpenAI) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// apiError writes OpenAI's error body, its members in OpenAI's order.
func apiError(w http.ResponseWriter, status int, kind, code, msg string) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b := body{Message: msg, Type: kind}
	if code != "" {
		b.Code = &code
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error body `json:"error"`
	}{b})
}
