package throttletest

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// zendeskTicketUpdates is Zendesk's limit on ticket updates per account
// per minute (without the High Volume add-on).
const zendeskTicketUpdates = 100

// NewZendesk returns a fake of an account's Zendesk Support API, counting
// per account (the request's host, unless Config.Key says otherwise) as
// Zendesk documents (developer.zendesk.com, "Rate limits", as of 2026-11):
//
//   - the account's limit: N requests per Window (zero: 700 per minute, the
//     Enterprise plan's), in windows aligned on the clock (each starts at a
//     multiple of Window since the Unix epoch);
//   - an endpoint's: ticket updates (PUT /api/v2/tickets/{id}) at most
//     N/7 per Window (100 a minute), beside the account's limit.
//
// Every answer carries X-Rate-Limit and X-Rate-Limit-Remaining; the
// ticketing endpoints (/api/v2/tickets…) also ratelimit-limit, -remaining
// and -reset (seconds), and a ticket update zendesk-ratelimit-tickets-update
// (total=…; remaining=…; resets=…). A request beyond a limit is answered 429
// with Retry-After (seconds).
func NewZendesk(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewZendesk")
	}
	return newAPI("NewZendesk", cfg, 700, time.Minute, keyHost,
		&zendesk{accounts: map[string]*fixedWindow{}, updates: map[string]*fixedWindow{}})
}

type zendesk struct {
	accounts, updates map[string]*fixedWindow
}

func (z *zendesk) answer(u *Upstream, r *http.Request, now time.Time) answer {
	key := u.cfg.Key(r)
	w := int64(u.cfg.Window)
	aligned := func(t time.Time) time.Time { return time.Unix(0, (t.UnixNano()/w+1)*w) }
	open := func(m map[string]*fixedWindow) *fixedWindow {
		fw := m[key]
		if fw == nil {
			fw = &fixedWindow{}
			m[key] = fw
		}
		fw.at(now, aligned)
		return fw
	}
	acct := open(z.accounts)
	segs := segments(r.URL.Path)
	ticketing := len(segs) >= 3 && segs[0] == "api" && segs[1] == "v2" && strings.HasPrefix(segs[2], "tickets")
	var upd *fixedWindow
	updN := max(1, u.cfg.N*zendeskTicketUpdates/700)
	if r.Method == http.MethodPut && ticketing && len(segs) == 4 {
		upd = open(z.updates)
	}

	a := answer{key: key, verdict: refused, status: http.StatusTooManyRequests, header: http.Header{}}
	switch {
	case acct.used >= u.cfg.N:
		a.body = `{"error":"APIRateLimitExceeded","description":"Number of allowed API requests per minute exceeded"}`
	case upd != nil && upd.used >= updN:
		a.body = `{"error":"APIRateLimitExceeded","description":"Number of allowed ticket updates per minute exceeded"}`
	default:
		acct.used++
		if upd != nil {
			upd.used++
		}
		a.verdict, a.status, a.body = accepted, http.StatusOK, `{"tickets":[]}`
	}
	reset := ceilSeconds(acct.end.Sub(now))
	if a.verdict == refused {
		a.header.Set("Retry-After", strconv.FormatInt(max(1, reset), 10))
	}
	a.header.Set("X-Rate-Limit", strconv.Itoa(u.cfg.N))
	a.header.Set("X-Rate-Limit-Remaining", strconv.Itoa(u.cfg.N-acct.used))
	if ticketing {
		a.header.Set("Ratelimit-Limit", strconv.Itoa(u.cfg.N))
		a.header.Set("Ratelimit-Remaining", strconv.Itoa(u.cfg.N-acct.used))
		a.header.Set("Ratelimit-Reset", strconv.FormatInt(reset, 10))
	}
	if upd != nil {
		a.header.Set("Zendesk-Ratelimit-Tickets-Update", "total="+strconv.Itoa(updN)+"; remaining="+
			strconv.Itoa(updN-upd.used)+"; resets="+strconv.FormatInt(ceilSeconds(upd.end.Sub(now)), 10))
	}
	return a
}
