// Command llm shows throttle in front of an OpenAI-compatible chat
// completions API, which limits both requests and tokens per minute (RPM
// and TPM). A fleet of workers, in one process or many sharing one Redis,
// sends prompts of varied sizes; every request reserves, before it is sent,
// what the API itself counts when it arrives (the prompt's tokens plus
// max_tokens), and is settled to its usage when its response ends, so that
// the tokens the model did not generate go back to the fleet.
//
// With no flags it runs on its own: an embedded Redis and an in-process
// fake of the API enforcing -rpm and -tpm per -per, with the rate-limit
// headers and the 429 body OpenAI sends.
//
//	go run ./examples/llm
//	go run ./examples/llm -stream
//	go run ./examples/llm -settle=false                  # the estimate stays counted
//	OPENAI_API_KEY=sk-… go run ./examples/llm -api https://api.openai.com -model gpt-4o-mini -rpm 500 -tpm 40000 -duration 3m
//
// It ends with two lines: the load's summary
// (sent=… ok=… 429=… limited=… cut=… errors=… wait_p50=… wait_p99=…) and
//
//	requests=… tokens=… budget=…% 429=…
//
// where tokens sums the usage of the answers, and budget is its share of
// the tokens this run could use: -tpm for each -per the run began.
//
// Settle only against an API that gives back, at the end of a response,
// what max_tokens reserved and the model did not generate. Against one that
// keeps the estimate counted for the whole minute, settling would count
// fewer tokens than the API does and meet 429s: run with -settle=false
// (the fake's -no-refund shows it).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/internal/fakeapi"
	"github.com/throttle-go/throttle/profiles"
	"github.com/throttle-go/throttle/store"
)

func main() { os.Exit(run()) }

func run() int {
	var load examplekit.Flags // -redis, -workers, -duration, -mode, -margin, -maxwait, -transit
	load.Register(flag.CommandLine)
	api := flag.String("api", "", "API base URL, e.g. https://api.openai.com (empty: in-process fake)")
	model := flag.String("model", "gpt-4o-mini", "the model asked for")
	rpm := flag.Int("rpm", 500, "requests allowed per -per")
	tpm := flag.Int("tpm", 40_000, "tokens allowed per -per")
	per := flag.Duration("per", time.Minute, "the limits' window")
	maxTokens := flag.Int("max-tokens", 400, "max_tokens of every request")
	stream := flag.Bool("stream", false, "ask for event streams, with the usage in the last event")
	settle := flag.Bool("settle", true, "settle each request's tokens to its usage when its response ends")
	noRefund := flag.Bool("no-refund", false, "in-process fake only: keep the estimate counted, never refund")
	tokenTime := flag.Duration("token-time", time.Millisecond, "in-process fake only: time to generate one token")
	flag.Parse()

	bad := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "llm: "+format+"\n", args...)
		return 2
	}
	if err := load.Check(*api == ""); err != nil {
		return bad("%v", err)
	}
	fakeOnly, maxWaitSet := false, false
	flag.Visit(func(f *flag.Flag) {
		fakeOnly = fakeOnly || f.Name == "no-refund" || f.Name == "token-time"
		maxWaitSet = maxWaitSet || f.Name == "maxwait"
	})
	switch {
	case flag.NArg() > 0:
		return bad("unexpected arguments %q", flag.Args())
	case *rpm < 1 || *tpm < 1:
		return bad("-rpm and -tpm must be at least 1")
	case *per < time.Millisecond:
		return bad("-per must be at least 1ms, not %s", *per)
	case *maxTokens < 1 || *maxTokens+maxPrompt > *tpm:
		return bad("-max-tokens must be from 1 to -tpm - %d (the longest prompt), not %d", maxPrompt, *maxTokens)
	case fakeOnly && *api != "":
		return bad("-no-refund and -token-time apply to the in-process fake only")
	}

	rdb, err := examplekit.StartRedis(context.Background(), load.RedisAddrs()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "llm:", err)
		return 1
	}
	defer rdb.Close()

	key := os.Getenv("OPENAI_API_KEY")
	var fake *fakeapi.OpenAI
	if *api == "" {
		fake, err = fakeapi.NewOpenAI(fakeapi.OpenAIConfig{RPM: *rpm, TPM: *tpm, Window: *per,
			NoRefund: *noRefund, TokenTime: *tokenTime, Transit: load.Transit, Seed: uint64(time.Now().UnixNano())})
		if err != nil {
			return bad("%v", err)
		}
		srv := httptest.NewServer(fake)
		defer srv.Close()
		*api, key = srv.URL, "sk-fake"
		fmt.Fprintf(os.Stderr, "in-process API: %d requests and %d tokens per %s, refunds %t\n", *rpm, *tpm, *per, !*noRefund)
	}
	if key == "" {
		return bad("set OPENAI_API_KEY to call %s", *api)
	}
	u, err := url.Parse(*api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("-api: %q is not an absolute http(s) URL", *api)
	}
	endpoint := strings.TrimSuffix(*api, "/") + "/v1/chat/completions"

	// The throttle: one log per API key (hashed, never stored in clear),
	// shared by every process using this Redis, counting requests and
	// tokens. A request reserves its estimate; with -settle, the usage in
	// its response (JSON body, or the stream's last event) replaces it.
	rule := throttle.Rule{
		Name:       "openai",
		Host:       u.Host,
		PathPrefix: "/v1/",
		Key:        throttle.ByBearerToken(),
		Limits:     []throttle.Limit{throttle.Per(*rpm, *per), throttle.Per(*tpm, *per).Of("tokens")},
		Costs:      map[string]func(*http.Request) int{"tokens": estimateTokens},
	}
	if *settle {
		rule.Actual = profiles.OpenAIUsage("tokens")
	}
	load.Apply(&rule) // -mode, -maxwait, -margin
	if !maxWaitSet && !rule.FailFast {
		// A request waits for a slot at most a tenth of the window; one
		// whose slot lies further ahead is refused and sent again after
		// its RetryAfter. A slot is placed on the estimates of the requests
		// reserved before it, and stays where it is when they settle: a
		// short queue ahead is what lets the refunds be used.
		rule.MaxWait = *per / 10
	}
	st, err := store.NewRedis(rdb.Client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "llm:", err)
		return 1
	}
	conns := http.DefaultTransport.(*http.Transport).Clone()
	conns.MaxIdleConnsPerHost = load.Workers
	tally := examplekit.NewTally(os.Stderr)
	tr, err := throttle.New(conns, st, throttle.WithRule(rule), throttle.WithOnDecision(tally.OnDecision))
	if err != nil {
		return bad("%v", err)
	}
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	fmt.Fprintf(os.Stderr, "llm: %s, %d workers, %s, mode %s, max wait %s, settle %t, stream %t\n",
		rdb, load.Workers, load.Duration, load.Mode, rule.MaxWait, *settle, *stream)

	var tokens atomic.Int64
	var told atomic.Bool
	ctx, cancel := context.WithTimeout(context.Background(), load.Duration)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	tally.Drive(ctx, load.Workers, func(ctx context.Context, worker, call int) (*http.Response, error) {
		rng := rand.New(rand.NewPCG(seed+uint64(worker), uint64(call)))
		resp, err := complete(ctx, client, endpoint, key, *model, prompt(rng), *maxTokens, *stream)
		if err != nil {
			return nil, err
		}
		n, body := read(resp, *stream)
		tokens.Add(int64(n))
		if resp.StatusCode == http.StatusTooManyRequests && !told.Swap(true) {
			fmt.Fprintf(os.Stderr, "first 429: %s", body)
		}
		return &http.Response{StatusCode: resp.StatusCode, Body: http.NoBody}, nil
	})

	c := tally.Counts()
	windows := math.Ceil(float64(load.Duration) / float64(*per))
	if fake != nil {
		s := fake.Stats()
		fmt.Fprintf(os.Stderr, "in-process API: %d requests, %d × 429 (%d on tokens), %d tokens used of %d estimated\n",
			s.Requests, s.TooMany(), s.TokensRefused, s.Used, s.Estimated)
	}
	fmt.Println(c)
	fmt.Printf("requests=%d tokens=%d budget=%.1f%% 429=%d\n",
		c.OK, tokens.Load(), 100*float64(tokens.Load())/(windows*float64(*tpm)), c.TooMany)
	return 0
}

// Prompts are from minPrompt to maxPrompt tokens: about four bytes each.
const minPrompt, maxPrompt = 50, 700

// prompt returns a user message of a random size.
func prompt(rng *rand.Rand) string {
	n := minPrompt + rng.IntN(maxPrompt-minPrompt+1)
	return strings.Repeat("word", n)
}

// complete sends one chat completion request. A 429 is a response, not an
// error.
func complete(ctx context.Context, client *http.Client, endpoint, key, model, text string, maxTokens int, stream bool) (*http.Response, error) {
	body := map[string]any{
		"model":      model,
		"messages":   []map[string]string{{"role": "user", "content": text}},
		"max_tokens": maxTokens,
	}
	if stream {
		body["stream"] = true
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	// A bytes.Reader body gives the request a GetBody, which the estimate
	// reads.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	return client.Do(req)
}

// estimateTokens is what OpenAI counts when a request arrives, an upper
// bound of what it finally uses: the prompt's tokens, about one per four
// bytes, plus max_tokens. It reads the body again through GetBody; a
// request it cannot read fails with throttle.ErrInvalidCost.
func estimateTokens(r *http.Request) int {
	if r.GetBody == nil {
		return -1
	}
	body, err := r.GetBody()
	if err != nil {
		return -1
	}
	defer body.Close()
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens           int `json:"max_tokens"`
		MaxCompletionTokens int `json:"max_completion_tokens"`
	}
	if json.NewDecoder(body).Decode(&req) != nil {
		return -1
	}
	n := max(req.MaxTokens, req.MaxCompletionTokens)
	for _, m := range req.Messages {
		n += (len(m.Content) + 3) / 4
	}
	return n
}

// read reads a response to its end and closes it: the throttle settles the
// request then. It returns the usage's total_tokens and, for an error, the
// body.
func read(resp *http.Response, stream bool) (int, []byte) {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return 0, b
	}
	type usage struct {
		Usage *struct {
			Total int `json:"total_tokens"`
		} `json:"usage"`
	}
	if !stream {
		var u usage
		if json.Unmarshal(b, &u) == nil && u.Usage != nil {
			return u.Usage.Total, nil
		}
		return 0, nil
	}
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		var u usage
		if ok && json.Unmarshal([]byte(data), &u) == nil && u.Usage != nil {
			total = u.Usage.Total
		}
	}
	return total, nil
}
