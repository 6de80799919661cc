package throttletest

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// NewGitHub returns a fake of GitHub's REST API, counting per token (the
// Authorization header, unless Config.Key says otherwise) as GitHub
// documents ("Rate limits for the REST API", as of 2026-05):
//
//   - the primary limit: N requests per Window (zero: 5,000 per hour) in a
//     fixed window that opens at the token's first request and closes at
//     the whole second x-ratelimit-reset announces, the last at most
//     Window after that request; each resource
//     (x-ratelimit-resource: search for /search, graphql for /graphql,
//     core for the rest) has a window of its own;
//   - the secondary limit on points: N×900/5,000 points per Window/60
//     (900 per minute), a GET, HEAD or OPTIONS costing 1 point and any
//     other method 5;
//   - the secondary limit on requests in flight: MaxInFlight (zero: 100)
//     at once, each for ServiceTime.
//
// Every answer carries x-ratelimit-limit, -remaining, -used, -reset (epoch
// seconds) and -resource. The primary limit exhausted is answered 403 with
// x-ratelimit-remaining: 0; a secondary limit, 403 with retry-after.
// Stats are kept per token.
func NewGitHub(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 100
	}
	g := &github{primary: map[string]*fixedWindow{}, points: map[string]*costLog{}, flying: map[string]int{}}
	u, err := newAPI("NewGitHub", cfg, 5000, time.Hour, keyHeader("Authorization"), g)
	if err != nil {
		return nil, err
	}
	g.pointsN = max(1, u.cfg.N*900/5000)
	g.pointsW = max(u.cfg.Window/60, 1)
	return u, nil
}

type github struct {
	pointsN int
	pointsW time.Duration
	primary map[string]*fixedWindow // by token and resource
	points  map[string]*costLog     // by token
	flying  map[string]int          // by token
}

func (g *github) answer(u *Upstream, r *http.Request, now time.Time) answer {
	token := u.cfg.Key(r)
	resource := "core"
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/search"):
		resource = "search"
	case strings.HasPrefix(p, "/graphql"):
		resource = "graphql"
	}
	fw := g.primary[token+" "+resource]
	if fw == nil {
		fw = &fixedWindow{}
		g.primary[token+" "+resource] = fw
	}
	fw.at(now, func(t time.Time) time.Time { return t.Add(u.cfg.Window).Truncate(time.Second) })
	pts := g.points[token]
	if pts == nil {
		pts = &costLog{}
		g.points[token] = pts
	}
	pts.trim(now, g.pointsW)
	cost := 5
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		cost = 1
	}

	a := answer{key: token, verdict: refused, status: http.StatusForbidden, header: http.Header{}}
	switch {
	case g.flying[token] >= u.cfg.MaxInFlight:
		// GitHub: without a wait stated, wait at least a minute.
		a.header.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(g.pointsW)), 10))
		a.body = `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","status":"403"}`
	case pts.sum+cost > g.pointsN:
		a.header.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(pts.retry(now, g.pointsN, cost, g.pointsW))), 10))
		a.body = `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","status":"403"}`
	case fw.used >= u.cfg.N:
		a.body = `{"message":"API rate limit exceeded.","status":"403"}`
	default:
		fw.used++
		pts.add(now, cost)
		g.flying[token]++
		a.verdict, a.status, a.body = accepted, http.StatusOK, `{"ok":true}`
		a.done = func() { g.flying[token]-- }
	}
	a.header.Set("X-Ratelimit-Limit", strconv.Itoa(u.cfg.N))
	a.header.Set("X-Ratelimit-Remaining", strconv.Itoa(u.cfg.N-fw.used))
	a.header.Set("X-Ratelimit-Used", strconv.Itoa(fw.used))
	a.header.Set("X-Ratelimit-Reset", strconv.FormatInt(fw.end.Unix(), 10))
	a.header.Set("X-Ratelimit-Resource", resource)
	return a
}
