package throttletest

import (
	"net/http"
	"strconv"
	"time"
)

// NewReddit returns a fake of Reddit's OAuth API, counting per OAuth token
// (the Authorization header, unless Config.Key says otherwise) as Reddit
// documents (support.reddithelp.com, "Data API Wiki", and
// github.com/reddit-archive/reddit/wiki/API, as of 2026-11):
//
//   - N requests per Window (zero: 1,000 per 10 minutes: 100 per minute
//     averaged over 10 minutes), in windows aligned on the clock (each
//     starts at a multiple of Window since the Unix epoch);
//   - an action (POST /api/comment or /api/submit) at most once per
//     Window/60 per token (Reddit states no figure; 10 seconds here):
//     one sooner is answered 200 with a RATELIMIT error in its JSON body.
//
// Every answer carries X-Ratelimit-Used, X-Ratelimit-Remaining (with a
// fraction, 998.0) and X-Ratelimit-Reset (seconds until the window ends);
// a request beyond N is answered 429.
func NewReddit(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewReddit")
	}
	return newAPI("NewReddit", cfg, 1000, 10*time.Minute, keyHeader("Authorization"),
		&reddit{windows: map[string]*fixedWindow{}, acted: map[string]time.Time{}})
}

type reddit struct {
	windows map[string]*fixedWindow
	acted   map[string]time.Time // each token's last action
}

func (d *reddit) answer(u *Upstream, r *http.Request, now time.Time) answer {
	key := u.cfg.Key(r)
	fw := d.windows[key]
	if fw == nil {
		fw = &fixedWindow{}
		d.windows[key] = fw
	}
	w := int64(u.cfg.Window)
	fw.at(now, func(t time.Time) time.Time { return time.Unix(0, (t.UnixNano()/w+1)*w) })
	action := r.Method == http.MethodPost && (r.URL.Path == "/api/comment" || r.URL.Path == "/api/submit")
	every := max(u.cfg.Window/60, 1)

	a := answer{key: key, verdict: refused, status: http.StatusTooManyRequests, header: http.Header{},
		body: `{"message":"Too Many Requests","error":429}`}
	switch last, ok := d.acted[key]; {
	case fw.used >= u.cfg.N:
	case action && ok && now.Sub(last) < every:
		fw.used++ // counted as a query all the same
		a.status = http.StatusOK
		a.body = `{"json":{"errors":[["RATELIMIT","Looks like you've been doing that a lot. Take a break for ` +
			strconv.FormatInt(ceilSeconds(every-now.Sub(last)), 10) + ` seconds before trying again.","ratelimit"]]}}`
	default:
		fw.used++
		if action {
			d.acted[key] = now
		}
		a.verdict, a.status, a.body = accepted, http.StatusOK, `{"kind":"Listing","data":{"children":[]}}`
	}
	a.header.Set("X-Ratelimit-Used", strconv.Itoa(fw.used))
	a.header.Set("X-Ratelimit-Remaining", strconv.Itoa(u.cfg.N-fw.used)+".0")
	a.header.Set("X-Ratelimit-Reset", strconv.FormatInt(ceilSeconds(fw.end.Sub(now)), 10))
	return a
}
