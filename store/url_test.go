package store_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

const urlSecret = "hunter2-S3cret"

// TestNewRedisURL: a redis:// URL with a password (and a database) reaches a
// server with requirepass, and one with an ACL user reaches it as that user;
// the closer closes the client.
func TestNewRedisURL(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", urlSecret)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: urlSecret})
	t.Cleanup(func() { _ = admin.Close() })
	setUser(t, admin, "throttle", urlSecret+"2", redisstore.DefaultPrefix)
	r := req(1, 0, lim(1, time.Second))

	for _, u := range []string{
		"redis://:" + urlSecret + "@" + srv.Addr,
		"redis://:" + urlSecret + "@" + srv.Addr + "/3?dial_timeout=2s&read_timeout=1s",
		"redis://throttle:" + urlSecret + "2@" + srv.Addr,
	} {
		s, closer, err := redisstore.NewRedisURL(u)
		require.NoError(t, err)
		assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed)
		require.NoError(t, closer.Close())
		_, err = s.Reserve(ctx, uniqueKey(t), r)
		assert.ErrorContains(t, err, "closed")
	}

	s, closer, err := redisstore.NewRedisURL("redis://:wrong-" + urlSecret + "@" + srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = closer.Close() })
	_, err = s.Reserve(ctx, uniqueKey(t), r)
	require.ErrorContains(t, err, "WRONGPASS")
	assert.NotContains(t, err.Error(), urlSecret)
}

// TestNewRedisURLTLS: rediss:// to a server that speaks only TLS, trusting
// its CA with WithTLSConfig; without it the certificate is refused, and a
// plain redis:// URL fails; no error holds the password.
func TestNewRedisURLTLS(t *testing.T) {
	srv, ca := redistest.StartTLS(t, "--requirepass", urlSecret)
	r := req(1, 0, lim(1, time.Second))
	u := "rediss://:" + urlSecret + "@" + srv.Addr

	s, closer, err := redisstore.NewRedisURL(u, redisstore.WithTLSConfig(&tls.Config{RootCAs: ca, MinVersion: tls.VersionTLS12}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = closer.Close() })
	assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed)

	// localhost is in the certificate too: ServerName comes from the URL.
	s, closer, err = redisstore.NewRedisURL(strings.Replace(u, "127.0.0.1", "localhost", 1), redisstore.WithTLSConfig(&tls.Config{RootCAs: ca, MinVersion: tls.VersionTLS12}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = closer.Close() })
	assert.True(t, reserve(t, s, uniqueKey(t), r).Allowed)

	for name, tc := range map[string]struct {
		url  string
		want string
	}{
		"unknown CA":     {u, "certificate"},
		"plain to a TLS": {"redis://:" + urlSecret + "@" + srv.Addr + "?dial_timeout=1s&read_timeout=1s", ""},
	} {
		t.Run(name, func(t *testing.T) {
			s, closer, err := redisstore.NewRedisURL(tc.url)
			require.NoError(t, err)
			t.Cleanup(func() { _ = closer.Close() })
			_, err = s.Reserve(ctx, uniqueKey(t), r)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), urlSecret)
			t.Log(err)
		})
	}
}

// TestNewRedisURLErrors: malformed URLs, unknown schemes and refused options
// fail in NewRedisURL, and no error holds the password, raw or decoded; an
// unreachable host fails at the first Reserve, without it too.
func TestNewRedisURLErrors(t *testing.T) {
	pw := urlSecret + "%21x"    // as written in the URL
	decoded := urlSecret + "!x" // as parsed
	for name, u := range map[string]string{
		"bad escape":           "redis://user:" + urlSecret + "%zz@127.0.0.1:6379",
		"bad port":             "redis://user:" + pw + "@127.0.0.1:port",
		"space in host":        "redis://user:" + pw + "@my host:6379",
		"bad db":               "redis://user:" + pw + "@127.0.0.1:6379/db" + urlSecret,
		"bad path":             "redis://user:" + pw + "@127.0.0.1:6379/1/2",
		"bad option":           "redis://user:" + pw + "@127.0.0.1:6379?pool_size=" + urlSecret,
		"unknown option":       "redis://user:" + pw + "@127.0.0.1:6379?passwd=1",
		"unknown scheme":       "http://user:" + pw + "@127.0.0.1:6379",
		"no scheme":            "user:" + pw + "@127.0.0.1:6379",
		"control character":    "redis://user:" + pw + "\x7f@127.0.0.1:6379",
		"sentinel, no master":  "redis-sentinel://user:" + pw + "@127.0.0.1:26379",
		"sentinel, replicas":   "redis-sentinel://127.0.0.1:26379?master_name=m&replica_only=true&password=" + pw,
		"sentinel, bad option": "redis-sentinel://127.0.0.1:26379?master_name=m&db=x&password=" + pw,
		"cluster, bad addr":    "redis-cluster://user:" + pw + "@127.0.0.1:7000?addr=nohost",
		"cluster, random":      "redis-cluster://user:" + pw + "@127.0.0.1:7000?route_randomly=true",
		"TLS config, no TLS":   "redis://user:" + pw + "@127.0.0.1:6379",
	} {
		t.Run(name, func(t *testing.T) {
			var opts []redisstore.RedisOption
			if strings.HasPrefix(name, "TLS") {
				opts = append(opts, redisstore.WithTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
			}
			s, closer, err := redisstore.NewRedisURL(u, opts...)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Nil(t, closer)
			assert.True(t, strings.HasPrefix(err.Error(), "store: NewRedisURL: "), err.Error())
			assert.NotContains(t, err.Error(), urlSecret)
			assert.NotContains(t, err.Error(), decoded)
			t.Log(err)
		})
	}

	port, err := redistest.FreePort()
	require.NoError(t, err)
	for _, u := range []string{
		fmt.Sprintf("redis://user:%s@127.0.0.1:%d?dial_timeout=1s", pw, port),
		fmt.Sprintf("rediss://user:%s@127.0.0.1:%d?dial_timeout=1s", pw, port),
		fmt.Sprintf("redis-sentinel://user:%s@127.0.0.1:%d?master_name=m&password=%s&dial_timeout=1s", pw, port, pw),
		fmt.Sprintf("redis-cluster://user:%s@127.0.0.1:%d?dial_timeout=1s", pw, port),
	} {
		s, closer, err := redisstore.NewRedisURL(u)
		require.NoError(t, err, "no I/O in the constructor")
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = s.Reserve(rctx, "k", req(1, 0, lim(1, time.Second)))
		cancel()
		require.Error(t, err)
		assert.NotContains(t, err.Error(), urlSecret)
		assert.NotContains(t, err.Error(), decoded)
		t.Log(err)
		require.NoError(t, closer.Close())
	}
}

// TestNewRedisURLClients: each scheme makes its client.
func TestNewRedisURLClients(t *testing.T) {
	for u, want := range map[string]string{
		"redis://127.0.0.1:6379":                             "*redis.Client",
		"rediss://127.0.0.1:6379":                            "*redis.Client",
		"unix:///run/redis.sock":                             "*redis.Client",
		"redis-sentinel://127.0.0.1:26379?master_name=m":     "*redis.Client",
		"rediss-sentinel://127.0.0.1:26379?master_name=m":    "*redis.Client",
		"redis-cluster://127.0.0.1:7000?addr=127.0.0.1:7001": "*redis.ClusterClient",
		"rediss-cluster://127.0.0.1:7000":                    "*redis.ClusterClient",
	} {
		_, closer, err := redisstore.NewRedisURL(u, redisstore.WithEvictionCheck(redisstore.EvictionOff))
		require.NoError(t, err, u)
		assert.Equal(t, want, fmt.Sprintf("%T", closer), u)
		require.NoError(t, closer.Close())
	}
	_, err := redisstore.NewRedis(fakeScripter{}, redisstore.WithTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	assert.ErrorContains(t, err, "WithTLSConfig is for NewRedisURL")
	_, _, err = redisstore.NewRedisURL("redis://127.0.0.1:6379", redisstore.WithBatching(1))
	assert.ErrorContains(t, err, "WithBatching(1)")
}

// TestNewRedisURLChecklist: the production checklist's advice combines. A
// URL carries dialer_retries and dialer_retry_timeout for every kind of
// client; the client NewRedisURL returns pings at start-up, as the ACL user
// of ACLRule too, and closes.
func TestNewRedisURLChecklist(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", urlSecret)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: urlSecret})
	t.Cleanup(func() { _ = admin.Close() })
	setUser(t, admin, "throttle", urlSecret+"2", store.DefaultPrefix)

	st, client, err := store.NewRedisURL("redis://throttle:" + urlSecret + "2@" + srv.Addr + "?dialer_retries=1&dialer_retry_timeout=10ms&dial_timeout=1s")
	require.NoError(t, err)
	c, ok := client.(*redis.Client)
	require.True(t, ok, "%T", client)
	assert.Equal(t, 1, c.Options().DialerRetries)
	assert.Equal(t, 10*time.Millisecond, c.Options().DialerRetryTimeout)
	assert.Equal(t, time.Second, c.Options().DialTimeout)
	require.NoError(t, client.Ping(ctx).Err(), "a ping at start-up, as the store's ACL user")
	res, err := st.Reserve(ctx, uniqueKey(t), req(1, 0, lim(1, time.Second)))
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	require.NoError(t, client.Close())

	for u, want := range map[string]int{
		"unix:///run/redis.sock?dialer_retries=2":                         2,
		"redis-sentinel://127.0.0.1:26379?master_name=m&dialer_retries=1": 1,
		"redis-cluster://127.0.0.1:7000?dialer_retries=1":                 1,
	} {
		_, client, err := store.NewRedisURL(u)
		require.NoError(t, err, u)
		switch c := client.(type) {
		case *redis.Client:
			assert.Equal(t, want, c.Options().DialerRetries, u)
		case *redis.ClusterClient:
			assert.Equal(t, want, c.Options().DialerRetries, u)
		}
		require.NoError(t, client.Close())
	}
	for _, u := range []string{"redis://127.0.0.1:6379?dialer_retries=x", "redis://127.0.0.1:6379?dialer_retry_timeout=soon"} {
		_, _, err := store.NewRedisURL(u)
		assert.ErrorContains(t, err, "store: NewRedisURL: ", u)
	}
}
