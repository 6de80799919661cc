package throttletest

import (
	"net/http"
	"strconv"
	"time"
)

// NewX returns a fake of X's API v2, counting per token (the Authorization
// header, unless Config.Key says otherwise) and endpoint (the method and
// the path, ids left out) as X documents (docs.x.com, "Rate limits", as of
// 2026-11):
//
//   - each endpoint: N requests per Window (zero: 900 per 15 minutes), in
//     a window that opens at the first request and resets at the epoch
//     second x-rate-limit-reset says;
//   - posting (POST /2/tweets) also counts against the token's 24-hour
//     limit, 12×N per 96 Windows (24 hours at X's figures; X's tiers
//     differ), reported in x-user-limit-24hour-limit, -remaining and
//     -reset.
//
// Every answer carries x-rate-limit-limit, -remaining and -reset; a
// request beyond a limit is answered 429 with X's "Too Many Requests"
// problem. Stats are kept per token and endpoint ("token endpoint").
func NewX(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewX")
	}
	return newAPI("NewX", cfg, 900, 15*time.Minute, keyHeader("Authorization"),
		&xAPI{windows: map[string]*fixedWindow{}, days: map[string]*fixedWindow{}})
}

type xAPI struct {
	windows map[string]*fixedWindow // by the Stats key
	days    map[string]*fixedWindow // by token
}

func (x *xAPI) answer(u *Upstream, r *http.Request, now time.Time) answer {
	token := u.cfg.Key(r)
	segs := segments(r.URL.Path)
	for i, s := range segs {
		if i > 0 && isDigits(s) { // not the version, 2
			segs[i] = "{id}"
		}
	}
	endpoint := r.Method + " /" + joinPath(segs)
	key := token + " " + endpoint
	fw := x.windows[key]
	if fw == nil {
		fw = &fixedWindow{}
		x.windows[key] = fw
	}
	fw.at(now, func(t time.Time) time.Time { return t.Add(u.cfg.Window).Truncate(time.Second) })
	var day *fixedWindow
	dayN := 12 * u.cfg.N
	if endpoint == "POST /2/tweets" {
		if day = x.days[token]; day == nil {
			day = &fixedWindow{}
			x.days[token] = day
		}
		day.at(now, func(t time.Time) time.Time { return t.Add(96 * u.cfg.Window).Truncate(time.Second) })
	}

	a := answer{key: key, verdict: refused, status: http.StatusTooManyRequests, header: http.Header{},
		body: `{"title":"Too Many Requests","detail":"Too Many Requests","type":"about:blank","status":429}`}
	if fw.used < u.cfg.N && (day == nil || day.used < dayN) {
		fw.used++
		if day != nil {
			day.used++
		}
		a.verdict, a.status, a.body = accepted, http.StatusOK, `{"data":{"id":"1"}}`
	}
	a.header.Set("X-Rate-Limit-Limit", strconv.Itoa(u.cfg.N))
	a.header.Set("X-Rate-Limit-Remaining", strconv.Itoa(u.cfg.N-fw.used))
	a.header.Set("X-Rate-Limit-Reset", strconv.FormatInt(fw.end.Unix(), 10))
	if day != nil {
		a.header.Set("X-User-Limit-24hour-Limit", strconv.Itoa(dayN))
		a.header.Set("X-User-Limit-24hour-Remaining", strconv.Itoa(dayN-day.used))
		a.header.Set("X-User-Limit-24hour-Reset", strconv.FormatInt(day.end.Unix(), 10))
	}
	return a
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func joinPath(segs []string) string {
	out := ""
	for i, s := range segs {
		if i > 0 {
			out += "/"
		}
		out += s
	}
	return out
}
