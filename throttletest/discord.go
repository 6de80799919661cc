package throttletest

import (
	"fmt"
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
func NewDiscord(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewDiscord")
	}
	return newAPI("NewDiscord", cfg, 5, 5*time.Second, keyHeader("Authorization"),
		&discord{buckets: map[string]*fixedWindow{}, global: map[string]*costLog{}})
}

type discord struct {
	buckets map[string]*fixedWindow // by the Stats key
	global  map[string]*costLog     // by token
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

func (d *discord) answer(u *Upstream, r *http.Request, now time.Time) answer {
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
