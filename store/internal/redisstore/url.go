package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewRedisURL returns a Redis store on a client it makes from rawURL, and
// that client, to ping at start-up and to close when the store is no longer
// used. It does no I/O. The URL says which client:
//
//	redis://[user:password@]host:port[/db][?options]            one server
//	rediss://...                                                the same over TLS
//	redis-sentinel://[user:password@]host:port[/db]?master_name=mymaster[&addr=host2:port2][&password=...]
//	rediss-sentinel://...                                       Sentinel, TLS to every node
//	redis-cluster://[user:password@]host:port[?addr=host2:port2...]
//	rediss-cluster://...                                        a Cluster over TLS
//	unix://[user:password@]/path/to/redis.sock[?db=N]
//
// The options are go-redis's (redis.ParseURL, redis.ParseFailoverURL,
// redis.ParseClusterURL): dial_timeout, read_timeout, pool_size, and so on;
// dialer_retries and dialer_retry_timeout are taken by every scheme (go-redis
// takes them only for Sentinel and Cluster). In a Sentinel URL the userinfo authenticates to the Sentinels and the
// username and password options to the master. Options that would send the
// store's writes to a replica (replica_only, route_by_latency,
// route_randomly) are refused.
//
// rediss verifies the server's certificate against the system's roots; give
// WithTLSConfig for a private CA or a client certificate.
//
// No error it returns contains the password: the URL is never quoted, and
// what the parsers quote is left out.
func NewRedisURL(rawURL string, opts ...RedisOption) (*Redis, redis.UniversalClient, error) {
	// A first pass over the options finds WithTLSConfig, which the client
	// needs before it exists; the store applies them all again below.
	scratch := &Redis{client: (*redis.Client)(nil)}
	for _, o := range opts {
		if o != nil {
			_ = o(scratch)
		}
	}
	client, err := newURLClient(rawURL, scratch.tlsConfig)
	if err != nil {
		return nil, nil, redactURLError(rawURL, err)
	}
	r, err := newRedis(client, opts, true)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return r, client, nil
}

// WithTLSConfig is the TLS configuration of the client NewRedisURL makes
// (a private CA in RootCAs, a client certificate), for a rediss URL. Its
// ServerName defaults to the URL's host. NewRedis refuses it: configure the
// client given to NewRedis instead.
func WithTLSConfig(cfg *tls.Config) RedisOption {
	return func(r *Redis) error {
		if cfg == nil {
			return errors.New("store: WithTLSConfig: nil config")
		}
		r.tlsConfig = cfg
		return nil
	}
}

// newURLClient parses rawURL and makes its client.
func newURLClient(rawURL string, tlsConfig *tls.Config) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, errors.New("not a URL (want redis://, rediss://, redis-sentinel://, redis-cluster:// or unix://)")
	}
	base, kind, _ := strings.Cut(scheme, "-")
	if base != "redis" && base != "rediss" && !(base == "unix" && kind == "") {
		return nil, fmt.Errorf("unknown scheme %s (want redis://, rediss://, redis-sentinel://, redis-cluster:// or unix://)", scheme)
	}
	secure := base == "rediss"
	if tlsConfig != nil && !secure {
		return nil, fmt.Errorf("WithTLSConfig needs a rediss URL, not %s", scheme)
	}
	withTLS := func(parsed *tls.Config) *tls.Config {
		if tlsConfig == nil {
			return parsed
		}
		c := tlsConfig.Clone()
		if c.ServerName == "" && parsed != nil {
			c.ServerName = parsed.ServerName
		}
		return c
	}
	u := base + "://" + rest
	switch kind {
	case "":
		u, retries, err := dialerRetries(u)
		if err != nil {
			return nil, err
		}
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, err
		}
		retries(o)
		o.TLSConfig = withTLS(o.TLSConfig)
		return redis.NewClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, err
		}
		if o.MasterName == "" {
			return nil, errors.New("a Sentinel URL needs master_name")
		}
		if o.ReplicaOnly || o.RouteByLatency || o.RouteRandomly {
			return nil, errors.New("replica_only, route_by_latency and route_randomly would send the store's writes to replicas")
		}
		o.TLSConfig = withTLS(o.TLSConfig)
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, err
		}
		if o.RouteByLatency || o.RouteRandomly {
			return nil, errors.New("route_by_latency and route_randomly would send the store's writes to replicas")
		}
		o.TLSConfig = withTLS(o.TLSConfig)
		return redis.NewClusterClient(o), nil
	default:
		return nil, fmt.Errorf("unknown scheme %s (want redis://, rediss://, redis-sentinel://, redis-cluster:// or unix://)", scheme)
	}
}

// dialerRetries takes dialer_retries and dialer_retry_timeout out of the
// query of a one-server URL, which redis.ParseURL refuses though
// ParseFailoverURL and ParseClusterURL take them, and returns what sets them.
func dialerRetries(u string) (string, func(*redis.Options), error) {
	base, query, ok := strings.Cut(u, "?")
	none := func(*redis.Options) {}
	if !ok {
		return u, none, nil
	}
	var keep []string
	retries, timeout := 0, time.Duration(0)
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "dialer_retries":
			retries, err = strconv.Atoi(v)
		case "dialer_retry_timeout":
			timeout, err = time.ParseDuration(v)
		default:
			keep = append(keep, kv)
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("invalid %s", k)
		}
	}
	if len(keep) > 0 {
		base += "?" + strings.Join(keep, "&")
	}
	return base, func(o *redis.Options) {
		if retries != 0 {
			o.DialerRetries = retries
		}
		if timeout != 0 {
			o.DialerRetryTimeout = timeout
		}
	}, nil
}

// quoted matches what an error quotes, which may be part of a URL.
var quoted = regexp.MustCompile(`"[^"]*"`)

// redactURLError returns err of parsing rawURL without anything that may be
// a secret: url.Parse quotes the whole URL, and the parsers quote values.
func redactURLError(rawURL string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the reason, without the URL
	}
	msg := quoted.ReplaceAllString(err.Error(), `"…"`)
	for _, s := range urlSecrets(rawURL) {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	return fmt.Errorf("store: NewRedisURL: %s", msg)
}

// urlSecrets returns the passwords in rawURL, raw and decoded, even when it
// does not parse: the userinfo's, and the password options'.
func urlSecrets(rawURL string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 { // shorter would redact ordinary words
			out = append(out, s)
		}
		if d, err := url.PathUnescape(s); err == nil && d != s && len(d) >= 3 {
			out = append(out, d)
		}
	}
	_, rest, _ := strings.Cut(rawURL, "://")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		if _, pw, ok := strings.Cut(rest[:i], ":"); ok {
			add(pw)
		}
	}
	if _, query, ok := strings.Cut(rawURL, "?"); ok {
		for _, kv := range strings.Split(query, "&") {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.Contains(strings.ToLower(k), "password") {
				add(v)
			}
		}
	}
	return out
}
