// Command instagram shows throttle in the setting of a crawler: many workers
// share a few access tokens, and each token may make 5000 calls per rolling
// hour. The rate key is a hash of the access_token query parameter, so a
// token never reaches Redis, the logs or the errors in clear.
//
// With no flags it runs on its own: an embedded Redis and an in-process
// strict API that answers 429 to any excess, per token, enforcing -rate per
// -per. By default that rolling hour is scaled down to 50 calls per 2s per
// token, so that a 10s run shows what a crawler meets after its first burst:
// every token spends its quota at once, then each request waits for the
// oldest call of its token to leave the window. -rate 5000 -per 1h is the
// real limit (its first hour spent, a request would wait most of an hour,
// more than -maxwait, and is refused).
//
// -app-rate adds the app's own limit over all its tokens together (the
// Instagram Graph API allows an app 200 calls per hour per user): each
// request then counts against its token and the app, both reserved in the
// same Redis call, and waits for the later of the two slots.
//
//	go run ./examples/instagram
//	go run ./examples/instagram -app-rate 100
//	go run ./examples/instagram -redis 127.0.0.1:6379 -api https://graph.instagram.com -tokens "$TOKENS" -rate 5000 -per 1h
//
// It prints progress every second (wait_max: the longest wait of the
// requests sent in that second), what each token sent and waited, and ends
// with one summary line:
//
//	sent=… ok=… 429=… limited=… cut=… errors=… wait_p50=… wait_p99=…
//
// limited counts the requests the throttle refused because their token had
// no slot within -maxwait; cut counts those the end of the run cut short: in
// flight, or refused at once because their slot lay beyond the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/throttletest"
)

func main() { os.Exit(run()) }

func run() int {
	var load examplekit.Flags // -redis, -workers, -duration, -mode, -margin, -maxwait, -transit
	load.Register(flag.CommandLine)
	api := flag.String("api", "", "API base URL; requests are GET URL/me/media?access_token=TOKEN (empty: in-process strict API)")
	tokenList := flag.String("tokens", "token-a,token-b,token-c", "comma-separated access tokens; workers spread requests over them")
	rate := flag.Int("rate", 50, "requests allowed per token per -per (Instagram: 5000)")
	per := flag.Duration("per", 2*time.Second, "the limit's rolling window (Instagram: 1h; scaled down so that a short run shows the waits)")
	appRate := flag.Int("app-rate", 0, "requests allowed per -per to the whole app, all tokens together (0: no app limit; Instagram: 200 per user of the app per hour)")
	flag.Parse()

	bad := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "instagram: "+format+"\n", args...)
		return 2
	}
	var tokens []string
	for t := range strings.SplitSeq(*tokenList, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tokens = append(tokens, t)
		}
	}
	switch err := load.Check(*api == ""); {
	case err != nil:
		return bad("%v", err)
	case flag.NArg() > 0:
		return bad("unexpected arguments (%d)", flag.NArg()) // they might be tokens: not printed
	case len(tokens) == 0:
		return bad("-tokens must list at least one token")
	case *rate < 1:
		return bad("-rate must be at least 1, not %d", *rate)
	case *appRate < 0:
		return bad("-app-rate must not be negative, not %d", *appRate)
	case *per < time.Millisecond:
		return bad("-per must be at least 1ms, not %s", *per)
	}

	// The Redis the processes share; without -redis an embedded one, so
	// that the example runs on its own.
	rdb, err := examplekit.StartRedis(context.Background(), load.RedisAddrs()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "instagram:", err)
		return 1
	}
	defer rdb.Close()

	base := *api
	if base == "" {
		// The fake API counts per token, as Instagram does: a sliding
		// window on arrival for each access_token.
		byToken := func(r *http.Request) string { return r.URL.Query().Get("access_token") }
		cfg := throttletest.Config{N: *rate, Window: *per, Key: byToken, Transit: load.Transit}
		if *appRate > 0 {
			// And, with -app-rate, for the whole app.
			cfg.Also = []throttletest.Config{{N: *appRate, Window: *per, Key: func(*http.Request) string { return "app" }}}
		}
		up, err := throttletest.NewUpstream(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "instagram:", err)
			return 1
		}
		srv := httptest.NewServer(up)
		defer srv.Close()
		base = srv.URL
		fmt.Fprintf(os.Stderr, "in-process strict API: %d per %s per token, %d per %s per app (0: none)\n", *rate, *per, *appRate, *per)
	}
	apiURL, err := url.Parse(base)
	if err != nil || (apiURL.Scheme != "http" && apiURL.Scheme != "https") || apiURL.Host == "" {
		return bad("-api: %q is not an absolute http(s) URL", base)
	}
	mediaURL := apiURL.JoinPath("me/media")

	// The throttle: every request to the API's host counts against the log
	// of its access token. ByQuery hashes the token: Redis sees
	// "throttle:{instagram:query:access_token:<hex>}", never the token.
	// Instagram counts a rolling hour exactly, so the rule sends each
	// window's calls in bursts (NoDefaultPace) rather than paced.
	rule := throttle.Rule{
		Name:          "instagram",
		Host:          apiURL.Host,
		Limits:        []throttle.Limit{throttle.Per(*rate, *per)},
		Key:           throttle.ByQuery("access_token"),
		NoDefaultPace: true,
	}
	if *appRate > 0 {
		// The app's limit: one more key, the same for every request. As
		// the hash tag, it keeps every key of the rule in one Cluster
		// slot, so that a request's two keys are reserved in one call.
		rule.Also = []throttle.KeyLimit{{
			Name: "app", Key: throttle.Fixed("my-app"), HashTag: true,
			Limits: []throttle.Limit{throttle.Per(*appRate, *per)},
		}}
	}
	load.Apply(&rule) // -mode, -maxwait, -margin
	st, err := store.NewRedis(rdb.Client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "instagram:", err)
		return 1
	}
	pool := http.DefaultTransport.(*http.Transport).Clone()
	pool.MaxIdleConnsPerHost = load.Workers // one idle connection per worker: no dial per request
	tally := examplekit.NewTally(os.Stderr)
	// What each token sent and waited, by its rate key: the hash the
	// throttle derives from the token, never the token.
	keys := make([]string, len(tokens))
	perKey := make(map[string]*waits, len(tokens)) // read-only from here on
	for i, tok := range tokens {
		keys[i], err = rule.Key(&http.Request{URL: &url.URL{RawQuery: url.Values{"access_token": {tok}}.Encode()}})
		if err != nil {
			return bad("token %d: %v", i+1, err)
		}
		perKey[keys[i]] = new(waits)
	}
	tr, err := throttle.New(pool, st, throttle.WithRule(rule), throttle.WithOnDecision(func(d throttle.Decision) {
		tally.OnDecision(d)
		if w := perKey[d.Key]; w != nil && d.Outcome == throttle.Sent {
			w.add(d.Delay)
		}
	}))
	if err != nil {
		return bad("%v", err)
	}
	client := &http.Client{Transport: tr}
	defer client.CloseIdleConnections()

	fmt.Fprintf(os.Stderr, "instagram: %s, %d tokens, %d per %s each, %d workers, %s, mode %s, margin %s\n",
		rdb, len(tokens), *rate, *per, load.Workers, load.Duration, load.Mode, rule.Margin)

	// The run's context ends at -duration: it cancels requests in flight,
	// and a waiting request whose slot lies beyond it fails at once. Each
	// worker takes the tokens in turn from its own starting point, so that
	// the workers spread over the tokens; when the throttle refuses a
	// request, the worker sleeps RetryAfter before its next one.
	ctx, cancel := context.WithTimeout(context.Background(), load.Duration)
	defer cancel()
	tally.Drive(ctx, load.Workers, func(ctx context.Context, worker, call int) (*http.Response, error) {
		return fetch(ctx, client, *mediaURL, tokens[(worker+call)%len(tokens)])
	})

	c := tally.Counts()
	for i, key := range keys {
		w := perKey[key]
		fmt.Fprintf(os.Stderr, "token %d (key %s…): sent %d, %d of them after a wait, the longest %s\n",
			i+1, key[:len(key)-24], w.sent.Load(), w.waited.Load(), time.Duration(w.longest.Load()).Round(time.Millisecond))
	}
	fmt.Fprintf(os.Stderr, "done: %d refused by the limit; %d cut by the end of the run (in flight, or their slot lay beyond it)\n",
		c.Limited, c.Cut)
	fmt.Println(c)
	return 0
}

// waits counts the requests of one token that the throttle sent, those that
// waited for their slot, and the longest wait. The decision hook runs between
// a request's slot and its send, so it takes no lock.
type waits struct {
	sent, waited, longest atomic.Int64
}

func (w *waits) add(delay time.Duration) {
	w.sent.Add(1)
	if delay > time.Millisecond {
		w.waited.Add(1)
	}
	for {
		old := w.longest.Load()
		if int64(delay) <= old || w.longest.CompareAndSwap(old, int64(delay)) {
			return
		}
	}
}

// fetch makes one call with token. A 429 is a response, not an error.
func fetch(ctx context.Context, client *http.Client, mediaURL url.URL, token string) (*http.Response, error) {
	mediaURL.RawQuery = url.Values{"access_token": {token}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, mediaURL.String(), nil)
	if err != nil {
		return nil, err
	}
	return client.Do(req)
}
