package throttletest

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// NewSlack returns a fake of Slack's Web API, counting per token (the
// Authorization header, unless Config.Key says otherwise) and method (the
// path under /api/) as Slack documents (api.slack.com, "Rate limits", as
// of 2026-11): N requests per rolling Window for each method (zero: 50 per
// minute, tier 3). A request beyond it is answered 429 with Retry-After and
// nothing else: no budget headers. Stats are kept per token and method
// ("token method").
func NewSlack(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewSlack")
	}
	return newAPI("NewSlack", cfg, 50, time.Minute, keyHeader("Authorization"),
		&slack{logs: map[string]*costLog{}})
}

type slack struct {
	logs map[string]*costLog
}

func (s *slack) answer(u *Upstream, r *http.Request, now time.Time) answer {
	key := u.cfg.Key(r) + " " + strings.TrimPrefix(r.URL.Path, "/api/")
	l := s.logs[key]
	if l == nil {
		l = &costLog{}
		s.logs[key] = l
	}
	l.trim(now, u.cfg.Window)
	if l.sum >= u.cfg.N {
		h := http.Header{}
		h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(l.retry(now, u.cfg.N, 1, u.cfg.Window))), 10))
		return answer{key: key, verdict: refused, status: http.StatusTooManyRequests, header: h,
			body: `{"ok":false,"error":"ratelimited"}`}
	}
	l.add(now, 1)
	return answer{key: key, verdict: accepted, status: http.StatusOK, body: `{"ok":true}`}
}
