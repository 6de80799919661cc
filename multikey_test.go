package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// perTokenAndApp limits each token to 2 per second and the app to 3.
func perTokenAndApp(failFast bool) throttle.Rule {
	return throttle.Rule{
		Host: "api.example.com", Key: throttle.ByQuery("access_token"),
		Limits: []throttle.Limit{throttle.PerSecond(2)}, FailFast: failFast, Margin: throttle.NoMargin,
		Also: []throttle.KeyLimit{{Name: "app", Key: throttle.Fixed("my-app"), Limits: []throttle.Limit{throttle.PerSecond(3)}, HashTag: true}},
	}
}

func getToken(t *testing.T, tr http.RoundTripper, token string) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://api.example.com/x?access_token="+token, nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

// TestAlsoEveryKeyLimits: a request waits for the latest slot its token and
// the app allow, and a refusal names the key and the limit that set it.
func TestAlsoEveryKeyLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		tr := newTransport(t, sent.base(), newMemory(t), throttle.WithRule(perTokenAndApp(true)))
		require.NoError(t, getToken(t, tr, "a"))
		require.NoError(t, getToken(t, tr, "a"))
		var le *throttle.LimitError
		require.ErrorAs(t, getToken(t, tr, "a"), &le, "token a's own limit")
		assert.Equal(t, throttle.PerSecond(2), le.Limit)
		require.NoError(t, getToken(t, tr, "b"), "the app's third")
		require.ErrorAs(t, getToken(t, tr, "b"), &le, "the app's limit")
		assert.Equal(t, throttle.PerSecond(3), le.Limit)
		assert.Equal(t, "my-app", le.Key)
		assert.Equal(t, time.Second, le.RetryAfter)
		assert.Equal(t, 3, sent.count())
	})
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		tr := newTransport(t, sent.base(), newMemory(t), throttle.WithRule(perTokenAndApp(false)))
		start := time.Now()
		for _, tok := range []string{"a", "b", "c", "d", "e", "f", "g"} {
			require.NoError(t, getToken(t, tr, tok))
		}
		// Seven tokens, one request each: the app's 3 per second paces them.
		var at []time.Duration
		for _, s := range sent.times {
			at = append(at, s.Sub(start))
		}
		assert.Equal(t, []time.Duration{0, 0, 0, time.Second, time.Second, time.Second, 2 * time.Second}, at)
	})
}

// TestAlsoConfig: what cannot work fails at construction.
func TestAlsoConfig(t *testing.T) {
	t.Parallel()
	app := func(mod func(*throttle.KeyLimit)) throttle.Rule {
		r := perTokenAndApp(false)
		r.Also = []throttle.KeyLimit{r.Also[0]}
		mod(&r.Also[0])
		return r
	}
	for name, r := range map[string]throttle.Rule{
		"no name":    app(func(k *throttle.KeyLimit) { k.Name = "" }),
		"braces":     app(func(k *throttle.KeyLimit) { k.Name = "{x}" }),
		"no key":     app(func(k *throttle.KeyLimit) { k.Key = nil }),
		"no limits":  app(func(k *throttle.KeyLimit) { k.Limits = nil }),
		"paced":      app(func(k *throttle.KeyLimit) { k.Limits = []throttle.Limit{throttle.Paced(10, time.Second, 0)} }),
		"bad window": app(func(k *throttle.KeyLimit) { k.Limits = []throttle.Limit{throttle.Per(1, time.Microsecond)} }),
		"fixed window": func() throttle.Rule {
			r := perTokenAndApp(false)
			r.Algorithm = throttle.FixedWindow
			return r
		}(),
		"two tags": func() throttle.Rule {
			r := perTokenAndApp(false)
			r.Also = append(r.Also, throttle.KeyLimit{Name: "host", Key: throttle.ByHost(), Limits: []throttle.Limit{throttle.PerSecond(9)}, HashTag: true})
			return r
		}(),
		"one name twice": func() throttle.Rule {
			r := perTokenAndApp(false)
			r.Also = append(r.Also, r.Also[0])
			r.Also[1].HashTag = false
			return r
		}(),
	} {
		_, err := throttle.New(nil, newMemory(t), throttle.WithRule(r))
		var ce *throttle.ConfigError
		assert.ErrorAs(t, err, &ce, name)
	}

	// A Cluster store takes keys with and without a shared tag. (NewRedis
	// and New do no I/O: the client never connects.)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	st, err := store.NewRedis(cc)
	require.NoError(t, err)
	untagged := perTokenAndApp(false)
	untagged.Also[0].HashTag = false
	_, err = throttle.New(nil, st, throttle.WithRule(untagged))
	assert.NoError(t, err, "keys in several slots")
	_, err = throttle.New(nil, st, throttle.WithRule(perTokenAndApp(false)))
	assert.NoError(t, err)
	_, err = throttle.New(nil, newMemory(t), throttle.WithRule(untagged))
	assert.NoError(t, err, "one process needs no tag")
}

// TestAlsoAcrossSlots: on a Redis Cluster, a rule whose app key shares no
// tag with its tokens keeps both limits, each token's log and the app's in
// slots of their own.
func TestAlsoAcrossSlots(t *testing.T) {
	cl := redistest.SharedCluster(t)
	client := cl.Client(t)
	prefix := "slots" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "") + ":"
	st, err := store.NewRedis(client, store.WithPrefix(prefix))
	require.NoError(t, err)
	var sent sendLog
	rule := perTokenAndApp(true)
	rule.Also[0].HashTag = false
	tr := newTransport(t, sent.base(), st, throttle.WithRule(rule))
	require.NoError(t, getToken(t, tr, "a"))
	require.NoError(t, getToken(t, tr, "a"))
	var le *throttle.LimitError
	require.ErrorAs(t, getToken(t, tr, "a"), &le)
	assert.Equal(t, throttle.PerSecond(2), le.Limit, "a's own limit")
	require.NoError(t, getToken(t, tr, "b"), "the app's third: a's refusal recorded nothing")
	require.ErrorAs(t, getToken(t, tr, "c"), &le)
	assert.Equal(t, throttle.PerSecond(3), le.Limit, "the app's limit")
	assert.Equal(t, 3, sent.count())
	var logs []string
	for _, addr := range cl.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		keys, err := node.Keys(context.Background(), prefix+"*").Result()
		_ = node.Close()
		if err == nil {
			logs = append(logs, keys...)
		}
	}
	slots := map[int]bool{}
	for _, k := range logs {
		if strings.HasSuffix(k, "}") { // a log: not its pace or seen mark, nor the published rules
			slots[redistest.Slot(k)] = true
		}
	}
	assert.Len(t, slots, 3, "%v: the two tokens' logs and the app's, each in a slot of its own", logs)
}

// TestAlsoKeysInRedis: every key of a request shares the tag, the raw token
// reaches no Redis key, and a refusal by the app records under no key.
func TestAlsoKeysInRedis(t *testing.T) {
	srv := redistest.Shared(t)
	client := srv.Client(t)
	prefix := "alsokeys" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "") + ":"
	st, err := store.NewRedis(client, store.WithPrefix(prefix))
	require.NoError(t, err)
	var sent sendLog
	tr := newTransport(t, sent.base(), st, throttle.WithRule(perTokenAndApp(true)))
	const token = "s3cr3t-token-value"
	require.NoError(t, getToken(t, tr, token))
	require.NoError(t, getToken(t, tr, "other"))
	keys, err := client.Keys(context.Background(), prefix+"{*").Result() // the logs, not the published rules
	require.NoError(t, err)
	// Each token's log, its seen mark and its default pace (Rule.NoDefaultPace
	// unset), and the app's log (the Also keys take window limits only).
	require.Len(t, keys, 7, "%v: two tokens and the app", keys)
	for _, k := range keys {
		assert.NotContains(t, k, token)
		assert.True(t, strings.HasPrefix(k, prefix+"{my-app}"), "%s shares the app's tag", k)
	}
	require.NoError(t, getToken(t, tr, "third"))
	err = getToken(t, tr, "fourth")
	require.True(t, errors.Is(err, throttle.ErrLimited), "%v", err)
	keys, err = client.Keys(context.Background(), prefix+"{*").Result() // the logs, not the published rules
	require.NoError(t, err)
	assert.Len(t, keys, 10, "%v: the refused token's log and pace were never written", keys)
}

// Each token may make 2 calls per second, and the app 3 over all its
// tokens: both are reserved together, and a refusal names the limit that
// set it.
func ExampleKeyLimit() {
	st, err := store.NewMemory() // store.NewRedis(client) for a fleet
	if err != nil {
		panic(err)
	}
	tr, err := throttle.New(fakeGateway, st, throttle.WithRule(throttle.Rule{
		Host:   "api.example.com",
		Key:    throttle.ByQuery("access_token"),
		Limits: []throttle.Limit{throttle.PerSecond(2)},
		Also: []throttle.KeyLimit{{
			Name: "app", Key: throttle.Fixed("my-app"), HashTag: true,
			Limits: []throttle.Limit{throttle.PerSecond(3)},
		}},
		FailFast: true,
	}))
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	for _, token := range []string{"a", "a", "a", "b", "b"} {
		resp, err := client.Get("https://api.example.com/me?access_token=" + token)
		var le *throttle.LimitError
		if errors.As(err, &le) {
			fmt.Printf("token %s: limited by %s\n", token, le.Limit)
			continue
		}
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("token %s: %s\n", token, resp.Status)
	}
	// Output:
	// token a: 200 OK
	// token a: 200 OK
	// token a: limited by 2/1s
	// token b: 200 OK
	// token b: limited by 3/1s
}

// TestAlsoFailLocal: while the shared store is down, FailLocal's limiter
// keeps the app's limit too, cut to the local share.
func TestAlsoFailLocal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent sendLog
		rule := perTokenAndApp(true)
		rule.Limits = []throttle.Limit{throttle.PerSecond(4)}
		rule.Also[0].Limits = []throttle.Limit{throttle.PerSecond(6)}
		tr := newTransport(t, sent.base(), failingStore(errors.New("down")), throttle.WithRule(rule),
			throttle.WithFailLocal(0.5))
		for _, tok := range []string{"a", "a", "b"} {
			require.NoError(t, getToken(t, tr, tok)) // each token 2 locally, the app 3
		}
		var le *throttle.LimitError
		require.ErrorAs(t, getToken(t, tr, "c"), &le)
		assert.Equal(t, throttle.PerSecond(6), le.Limit, "the app's limit (its local share is 3)")
		require.ErrorAs(t, getToken(t, tr, "a"), &le)
		assert.Equal(t, throttle.PerSecond(4), le.Limit, "a's limit (its local share is 2)")
		assert.Equal(t, 3, sent.count())
	})
}
