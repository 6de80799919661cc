// Command instagram shows throttle in the setting of a crawler: many workers
// share a few access tokens, and each token may make 5000 calls per rolling
// hour. The rate key is a hash of the access_token query parameter, so a
// token never reaches Redis, the logs or the errors in clear.
//
// With no flags it runs on its own: an embedded Redis and an in-process
// strict API that answers 429 to any excess, per token, enforcing -rate per
// -per.
//
//	go run ./examples/instagram
//	go run ./examples/instagram -redis 127.0.0.1:6379 -api https://graph.instagram.com -tokens "$TOKENS"
//
// It prints progress every second and ends with one summary line:
//
//	sent=… ok=… 429=… limited=… errors=… wait_p50=… wait_p99=…
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/exampleutil"
	"github.com/throttle-go/throttle/internal/upstream"
	"github.com/throttle-go/throttle/store"
)

func main() { os.Exit(run()) }

// errorPause is how long a worker rests after an error other than a
// refusal (API down, Redis unreachable), so that it never spins.
const errorPause = 200 * time.Millisecond

func run() int {
	redisAddrs := flag.String("redis", "", "Redis address, or several comma-separated for a Cluster (empty: embedded Redis)")
	api := flag.String("api", "", "API base URL; requests are GET URL/me/media?access_token=TOKEN (empty: in-process strict API)")
	tokenList := flag.String("tokens", "token-a,token-b,token-c", "comma-separated access tokens; workers spread requests over them")
	rate := flag.Int("rate", 5000, "requests allowed per token per -per")
	per := flag.Duration("per", time.Hour, "the limit's window")
	workers := flag.Int("workers", 8, "concurrent workers in this process")
	duration := flag.Duration("duration", 10*time.Second, "how long to run")
	mode := flag.String("mode", "wait", "wait: wait for a free slot; fail: fail fast when none is free")
	margin := flag.Duration("margin", throttle.DefaultMargin, "safety margin added to the window (0: none)")
	transit := flag.Duration("transit", 0, "in-process API only: max random transit delay per request")
	maxWait := flag.Duration("maxwait", throttle.DefaultMaxWait, "wait mode: longest wait for a slot")
	flag.Parse()

	bad := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "instagram: "+format+"\n", args...)
		return 2
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var tokens []string
	for t := range strings.SplitSeq(*tokenList, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tokens = append(tokens, t)
		}
	}
	switch {
	case flag.NArg() > 0:
		return bad("unexpected arguments (%d)", flag.NArg()) // they might be tokens: not printed
	case len(tokens) == 0:
		return bad("-tokens must list at least one token")
	case *rate < 1:
		return bad("-rate must be at least 1, not %d", *rate)
	case *per < time.Millisecond:
		return bad("-per must be at least 1ms, not %s", *per)
	case *workers < 1:
		return bad("-workers must be at least 1, not %d", *workers)
	case *duration <= 0:
		return bad("-duration must be positive, not %s", *duration)
	case *mode != "wait" && *mode != "fail":
		return bad("-mode must be wait or fail, not %q", *mode)
	case *margin < 0:
		return bad("-margin must not be negative, not %s", *margin)
	case *transit < 0:
		return bad("-transit must not be negative, not %s", *transit)
	case *transit > 0 && *api != "":
		return bad("-transit applies to the in-process API only; drop it or -api")
	case *mode == "fail" && set["maxwait"]:
		return bad("-maxwait applies to -mode wait only")
	case *maxWait <= 0:
		return bad("-maxwait must be positive (use -mode fail to never wait), not %s", *maxWait)
	}

	rdb, where, closeRedis, err := exampleutil.Redis(*redisAddrs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "instagram:", err)
		return 1
	}
	defer closeRedis()
	if err := exampleutil.Ping(context.Background(), rdb); err != nil {
		fmt.Fprintf(os.Stderr, "instagram: %s does not answer: %v\n", where, err)
		return 1
	}

	base := *api
	if base == "" {
		byToken := func(r *http.Request) string { return r.URL.Query().Get("access_token") }
		url, stop, err := exampleutil.Upstream(upstream.Config{N: *rate, Window: *per, Key: byToken, Transit: *transit})
		if err != nil {
			fmt.Fprintln(os.Stderr, "instagram:", err)
			return 1
		}
		defer stop()
		base = url
		fmt.Fprintf(os.Stderr, "in-process strict API: %d per %s per token\n", *rate, *per)
	}
	apiURL, err := exampleutil.ParseURL(base)
	if err != nil {
		return bad("-api: %v", err)
	}
	mediaURL := strings.TrimSuffix(base, "/") + "/me/media"

	// The throttle: every request to the API's host counts against the log
	// of its access token. ByQuery hashes the token: Redis sees
	// "throttle:{instagram:query:access_token:<hex>}", never the token.
	rule := throttle.Rule{
		Name:   "instagram",
		Host:   apiURL.Host,
		Limits: []throttle.Limit{throttle.Per(*rate, *per)},
		Key:    throttle.ByQuery("access_token"),
		Margin: *margin,
	}
	if *margin == 0 {
		rule.Margin = throttle.NoMargin // Margin 0 in a Rule means the default
	}
	if *mode == "fail" {
		rule.Mode = throttle.FailFast
	} else {
		rule.MaxWait = *maxWait
	}
	st, err := store.NewRedis(rdb)
	if err != nil {
		fmt.Fprintln(os.Stderr, "instagram:", err)
		return 1
	}
	stats := exampleutil.NewStats()
	tr, err := throttle.New(exampleutil.Base(*workers), st,
		throttle.WithRule(rule),
		throttle.WithOnDecision(stats.OnDecision),
	)
	if err != nil {
		return bad("%v", err)
	}
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	fmt.Fprintf(os.Stderr, "instagram: %s, %d tokens, %d per %s each, %d workers, %s, mode %s, margin %s\n",
		where, len(tokens), *rate, *per, *workers, *duration, *mode, rule.Margin)

	// The run's context ends at -duration: it cancels requests in flight,
	// and a waiting request whose slot lies beyond it fails at once.
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	progressCtx, stopProgress := context.WithCancel(context.Background())
	var progress sync.WaitGroup
	progress.Go(func() { stats.Progress(progressCtx, os.Stderr, time.Second) })

	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() { worker(ctx, client, mediaURL, tokens, w, stats) })
	}
	wg.Wait()
	stopProgress()
	progress.Wait()

	fmt.Fprintf(os.Stderr, "done: %d requests cut short by the end of the run\n", stats.Canceled())
	fmt.Println(stats.Summary())
	return 0
}

// worker fetches media until the run ends, taking the tokens in turn from
// its own starting point, so that the workers spread over the tokens. When
// the throttle refuses a request, it sleeps RetryAfter before the next one.
func worker(ctx context.Context, client *http.Client, mediaURL string, tokens []string, w int, stats *exampleutil.Stats) {
	for i := w; ctx.Err() == nil; i++ {
		err := fetch(ctx, client, mediaURL, tokens[i%len(tokens)], stats)
		var limited *throttle.LimitError
		switch {
		case err == nil:
		case errors.As(err, &limited):
			stats.Limited()
			exampleutil.Sleep(ctx, limited.RetryAfter)
		default:
			stats.Failed(ctx, err)
			exampleutil.Sleep(ctx, errorPause)
		}
	}
}

// fetch makes one call with token. A 429 is a response, not an error.
func fetch(ctx context.Context, client *http.Client, mediaURL, token string, stats *exampleutil.Stats) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, mediaURL+"?"+url.Values{"access_token": {token}}.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer exampleutil.Drain(resp)
	stats.Status(resp.StatusCode)
	return nil
}
