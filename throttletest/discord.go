package throttletest

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// discordGlobal is Discord's global limit: 50 requests per second per bot.
const discordGlobal = 50

// NewDiscord returns a fake of Discord's HTTP API, counting per bot token
// (the Authorization header, unless Config.Key says otherwise) as Discord
// documents (discord.com/developers/docs/topics/rate-limits, as of
// 2026-05):
//
//   - each route has a bucket of N requests per Window (zero: 5 per 5
//     seconds; Discord states its figures only in its headers) that opens
//     at its first request; routes that differ only in their ids share a
//     bucket, counted apart for each major parameter (the id after
//     channels, guilds or webhooks);
//   - all routes of a token share the global limit of 50 requests per
//     second.
//
// Every answer carries the bucket's X-RateLimit-Limit, -Remaining, -Reset
// (epoch seconds with a fraction), -Reset-After (seconds with a fraction)
// and -Bucket (its id). A refusal is a 429 with Retry-After, X-RateLimit-Scope
// and a JSON body whose retry_after is in seconds with a fraction; a refusal
// by the global limit also says X-RateLimit-Global: true. Stats are kept
// per token, bucket and major parameter ("token bucket/id").
//
// A request whose Authorization is neither "Bot …" nor "Bearer …" is
// answered 401. A client that gets 10,000 invalid responses (401, 403 or
// 429) in 10 minutes is banned for an hour, as Discord restricts an IP
// address: every request from it (its RemoteAddr's host; all requests
// without one count as one client) is then answered 429 with Cloudflare's
// "error code: 1015" and Retry-After: 3600, and counts as rejected under
// the key "banned".
func NewDiscord(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewDiscord")
	}
	return newAPI("NewDiscord", cfg, 5, 5*time.Second, keyHeader("Authorization"),
		&discord{buckets: map[string]*fixedWindow{}, global: map[string]*costLog{},
			invalid: map[string]*costLog{}, banned: map[string]time.Time{}})
}

type discord struct {
	buckets map[string]*fixedWindow // by the Stats key
	global  map[string]*costLog     // by token
	invalid map[string]*costLog     // by client: its invalid responses
	banned  map[string]time.Time    // by client: until when
}

// Discord's ban for invalid requests: 10,000 per 10 minutes, an hour.
const (
	discordInvalid       = 10_000
	discordInvalidWindow = 10 * time.Minute
	discordBan           = time.Hour
)

// client is the host of r's RemoteAddr, as an IP address is banned.
func client(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// answer answers r, then counts an invalid answer against its client,
// banning it at discordInvalid.
func (d *discord) answer(u *Upstream, r *http.Request, now time.Time) answer {
	ip := client(r)
	if until, ok := d.banned[ip]; ok && now.Before(until) {
		h := http.Header{}
		h.Set("Retry-After", strconv.FormatInt(ceilSeconds(until.Sub(now)), 10))
		h.Set("Content-Type", "text/plain")
		return answer{key: "banned", verdict: refused, status: http.StatusTooManyRequests, header: h, body: "error code: 1015"}
	}
	a := d.route(u, r, now)
	if a.status == http.StatusUnauthorized || a.status == http.StatusForbidden || a.status == http.StatusTooManyRequests {
		l := d.invalid[ip]
		if l == nil {
			l = &costLog{}
			d.invalid[ip] = l
		}
		l.trim(now, discordInvalidWindow)
		if l.add(now, 1); l.sum >= discordInvalid {
			d.banned[ip] = now.Add(discordBan)
			l.at, l.cost, l.sum = nil, nil, 0
		}
	}
	return a
}

// discordRoute returns the bucket's id of a path and its major parameter.
func discordRoute(method, path string) (id, major string) {
	segs := segments(path)
	for i, s := range segs {
		if strings.Trim(s, "0123456789") != "" {
			continue
		}
		if major == "" && i > 0 && (segs[i-1] == "channels" || segs[i-1] == "guilds" || segs[i-1] == "webhooks") {
			major = s
		}
		segs[i] = "{id}"
	}
	return hashID(method + " " + strings.Join(segs, "/")), major
}

// route answers r by its route's bucket and the global limit.
func (d *discord) route(u *Upstream, r *http.Request, now time.Time) answer {
	if v := r.Header.Get("Authorization"); !strings.HasPrefix(v, "Bot ") && !strings.HasPrefix(v, "Bearer ") {
		return answer{key: u.cfg.Key(r), verdict: neither, status: http.StatusUnauthorized, header: http.Header{},
			body: `{"message":"401: Unauthorized","code":0}`}
	}
	token := u.cfg.Key(r)
	id, major := discordRoute(r.Method, r.URL.Path)
	key := token + " " + id + "/" + major
	fw := d.buckets[key]
	if fw == nil {
		fw = &fixedWindow{}
		d.buckets[key] = fw
	}
	fw.at(now, func(t time.Time) time.Time { return t.Add(u.cfg.Window) })
	g := d.global[token]
	if g == nil {
		g = &costLog{}
		d.global[token] = g
	}
	g.trim(now, time.Second)

	a := answer{key: key, verdict: refused, status: http.StatusTooManyRequests, header: http.Header{}}
	var wait time.Duration
	switch {
	case fw.used >= u.cfg.N:
		wait = fw.end.Sub(now)
		a.header.Set("X-Ratelimit-Scope", "user")
	case g.sum >= discordGlobal:
		wait = g.retry(now, discordGlobal, 1, time.Second)
		a.header.Set("X-Ratelimit-Global", "true")
		a.header.Set("X-Ratelimit-Scope", "global")
	default:
		fw.used++
		g.add(now, 1)
		a.verdict, a.status, a.body = accepted, http.StatusOK, `{"id":"1"}`
	}
	if a.verdict == refused {
		a.header.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(wait)), 10))
		a.body = fmt.Sprintf(`{"message":"You are being rate limited.","retry_after":%s,"global":%t}`,
			seconds(wait), a.header.Get("X-Ratelimit-Global") == "true")
	}
	a.header.Set("X-Ratelimit-Limit", strconv.Itoa(u.cfg.N))
	a.header.Set("X-Ratelimit-Remaining", strconv.Itoa(u.cfg.N-fw.used))
	a.header.Set("X-Ratelimit-Reset", epochSeconds(fw.end))
	a.header.Set("X-Ratelimit-Reset-After", seconds(fw.end.Sub(now)))
	a.header.Set("X-Ratelimit-Bucket", id)
	return a
}
