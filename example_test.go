package throttle_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

// fakeGateway stands in for the network in the examples: it answers 200.
var fakeGateway = roundTripperFunc(func(r *http.Request) (*http.Response, error) {
	return okResponse(r), nil
})

// A payment gateway allows us 2 calls per second, whichever machine makes
// them. With FailFast, the third call within the second is refused at once
// with ErrLimited, and the caller may requeue it.
func ExampleNew() {
	st, err := store.NewMemory() // store.NewRedis(client) for a fleet
	if err != nil {
		panic(err)
	}
	tr, err := throttle.New(fakeGateway, st, throttle.WithRule(throttle.Rule{
		Name:     "acme-pay",
		Host:     "pay.acme.example",
		Limits:   []throttle.Limit{throttle.PerSecond(2)},
		Key:      throttle.Fixed("gateway:acme"),
		FailFast: true,
	}))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}

	for i := 1; i <= 3; i++ {
		resp, err := client.Post("https://pay.acme.example/charges", "application/json", nil)
		if errors.Is(err, throttle.ErrLimited) {
			fmt.Printf("call %d: limited\n", i)
			continue
		}
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("call %d: %s\n", i, resp.Status)
	}
	// Output:
	// call 1: 200 OK
	// call 2: 200 OK
	// call 3: limited
}

// A refusal says which rule, key and limit refused the request, and when to
// retry.
func ExampleLimitError() {
	st, err := store.NewMemory()
	if err != nil {
		panic(err)
	}
	tr, err := throttle.New(fakeGateway, st, throttle.WithRule(throttle.Rule{
		Name:     "reports",
		Host:     "api.example.com",
		Limits:   []throttle.Limit{throttle.PerSecond(10), throttle.PerHour(1)},
		FailFast: true,
	}))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}

	for range 2 {
		resp, err := client.Get("https://api.example.com/v1/report")
		var le *throttle.LimitError
		if errors.As(err, &le) {
			// Real time passes between the calls: round RetryAfter.
			fmt.Printf("rule %s, key %s, limit %s, retry after %s\n",
				le.Rule, le.Key, le.Limit, le.RetryAfter.Round(time.Minute))
			continue
		}
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	// Output:
	// 200 OK
	// rule reports, key host:api.example.com, limit 1/1h0m0s, retry after 1h0m0s
}

// Access tokens are keys, but never in clear: each token gets its own log,
// named by a hash of the token.
func ExampleByBearerToken() {
	req, err := http.NewRequest(http.MethodGet, "https://graph.example.com/me", nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer abc")
	key, err := throttle.ByBearerToken()(req)
	if err != nil {
		panic(err)
	}
	fmt.Println(key)

	req.Header.Set("Authorization", "Basic abc")
	_, err = throttle.ByBearerToken()(req)
	fmt.Println(err)
	// Output:
	// bearer:ba7816bf8f01cfea414140de5dae2223
	// the Authorization header is not a bearer token (ByAuthorization keys any scheme)
}

// ByAuthorization keys a request by its credential whatever the scheme:
// GitHub takes a token as "token X" or "Bearer X" and counts both as one, so
// both get the same key.
func ExampleByAuthorization() {
	req, err := http.NewRequest(http.MethodGet, "https://api.github.com/user", nil)
	if err != nil {
		panic(err)
	}
	for _, v := range []string{"token abc", "Bearer abc", "Basic abc"} {
		req.Header.Set("Authorization", v)
		key, err := throttle.ByAuthorization()(req)
		if err != nil {
			panic(err)
		}
		fmt.Println(key)
	}
	req.Header.Del("Authorization")
	_, err = throttle.ByAuthorization()(req)
	fmt.Println(err)
	// Output:
	// bearer:ba7816bf8f01cfea414140de5dae2223
	// bearer:ba7816bf8f01cfea414140de5dae2223
	// bearer:ba7816bf8f01cfea414140de5dae2223
	// no Authorization header (a transport that adds it, such as oauth2.Transport, must wrap the throttle's Transport, not be its base)
}

// FirstOf keys requests by their token when they carry one, and by their host
// otherwise.
func ExampleFirstOf() {
	key := throttle.FirstOf(throttle.ByQuery("access_token"), throttle.ByHost())
	for _, u := range []string{
		"https://graph.example.com/me?access_token=abc",
		"https://graph.example.com/public",
	} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			panic(err)
		}
		k, err := key(req)
		if err != nil {
			panic(err)
		}
		fmt.Println(k)
	}
	// Output:
	// query:access_token:ba7816bf8f01cfea414140de5dae2223
	// host:graph.example.com
}

// A token may make a million calls a day: a sliding log would keep a million
// entries per token, so the rule counts in one-hour buckets instead (24
// counters), at the price of letting through, in any 24 hours, up to the
// units of the one bucket the window only partly covers.
func ExampleRule_buckets() {
	st, err := store.NewMemory() // store.NewRedis(client) for a fleet
	if err != nil {
		panic(err)
	}
	tr, err := throttle.New(fakeGateway, st, throttle.WithRule(throttle.Rule{
		Host:      "graph.example.com",
		Limits:    []throttle.Limit{{N: 1_000_000, Per: 24 * time.Hour, Precision: time.Hour}},
		Key:       throttle.ByBearerToken(),
		Algorithm: throttle.Buckets,
		FailFast:  true,
	}))
	if err != nil {
		panic(err)
	}
	req, err := http.NewRequest(http.MethodGet, "https://graph.example.com/me", nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer abc")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// 200 OK
}

// A request that no rule matches is refused by default: a typo in a host
// shows at the first request instead of leaving the upstream unlimited.
// WithUnmatchedSent(false) would send it without a limit, and
// WithUnmatchedSent(true) would send it and warn once per host.
func ExampleUnmatchedError() {
	st, err := store.NewMemory()
	if err != nil {
		panic(err)
	}
	tr, err := throttle.New(fakeGateway, st, throttle.WithRule(throttle.Rule{
		Host:   "graph.instagram.com",
		Limits: []throttle.Limit{throttle.PerHour(200)},
		Key:    throttle.ByQuery("access_token"),
	}))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	_, err = client.Get("https://graph.facebook.com/me?access_token=abc")
	var ue *throttle.UnmatchedError
	if errors.As(err, &ue) {
		fmt.Println(ue.Host)
		fmt.Println(ue)
	}
	// Output:
	// graph.facebook.com
	// throttle: no rule matches host "graph.facebook.com", so the request was not sent: add a Rule for it (WithRule), a default rule (WithDefault), or send unmatched requests without a limit (WithUnmatchedSent)
}
