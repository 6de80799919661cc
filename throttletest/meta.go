package throttletest

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// NewMeta returns a fake of Meta's Graph API, counting as Meta documents
// (developers.facebook.com, "Rate Limits", as of 2026-05):
//
//   - the app's calls: N per rolling Window (zero: 200 per hour, Meta's
//     200 calls per user for an app of one user), per app token (the
//     access_token query parameter, else the Authorization header, unless
//     Config.Key says otherwise);
//   - an ad account's business use case (a path under /act_<id>): N per
//     rolling Window too, per ad account.
//
// Every answer carries X-App-Usage, {"call_count":…,"total_cputime":…,
// "total_time":…}, each the percentage of the app's limit used (rounded
// down); a request under an ad account also carries
// X-Business-Use-Case-Usage, {"<id>":[{"type":"ads_management",
// "call_count":…,"total_cputime":…,"total_time":…,
// "estimated_time_to_regain_access":minutes}]}. A call beyond a limit is
// refused with 400 and Meta's error: code 4, "Application request limit
// reached", for the app; 80004, "There have been too many calls to this
// ad-account", for the ad account. Stats are kept per app token.
func NewMeta(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewMeta")
	}
	return newAPI("NewMeta", cfg, 200, time.Hour, keyQuery("access_token", "Authorization"),
		&meta{apps: map[string]*costLog{}, accounts: map[string]*costLog{}})
}

type meta struct {
	apps, accounts map[string]*costLog
}

// metaAccount returns the ad account of a path under /act_<id>, "" if none.
func metaAccount(path string) string {
	for _, s := range segments(path) {
		if id, ok := strings.CutPrefix(s, "act_"); ok && id != "" && strings.Trim(id, "0123456789") == "" {
			return id
		}
	}
	return ""
}

func (m *meta) answer(u *Upstream, r *http.Request, now time.Time) answer {
	n, w := u.cfg.N, u.cfg.Window
	key := u.cfg.Key(r)
	log := func(logs map[string]*costLog, k string) *costLog {
		l := logs[k]
		if l == nil {
			l = &costLog{}
			logs[k] = l
		}
		l.trim(now, w)
		return l
	}
	app := log(m.apps, key)
	account := metaAccount(r.URL.Path)
	var acct *costLog
	if account != "" {
		acct = log(m.accounts, account)
	}

	a := answer{key: key, verdict: refused, status: http.StatusBadRequest, header: http.Header{}}
	switch {
	case app.sum >= n:
		a.body = `{"error":{"message":"(#4) Application request limit reached","type":"OAuthException","is_transient":true,"code":4}}`
	case acct != nil && acct.sum >= n:
		a.body = `{"error":{"message":"(#80004) There have been too many calls to this ad-account. Wait a bit and try again.","type":"OAuthException","is_transient":true,"code":80004}}`
	default:
		app.add(now, 1)
		if acct != nil {
			acct.add(now, 1)
		}
		a.verdict, a.status, a.body = accepted, http.StatusOK, `{"data":[]}`
	}
	pct := func(l *costLog) int { return l.sum * 100 / n }
	a.header.Set("X-App-Usage", fmt.Sprintf(`{"call_count":%d,"total_cputime":%d,"total_time":%d}`, pct(app), pct(app), pct(app)))
	if acct != nil {
		var regain int64
		if acct.sum >= n {
			regain = (int64(acct.retry(now, n, 1, w)) + int64(time.Minute) - 1) / int64(time.Minute)
		}
		a.header.Set("X-Business-Use-Case-Usage", fmt.Sprintf(
			`{"%s":[{"type":"ads_management","call_count":%d,"total_cputime":%d,"total_time":%d,"estimated_time_to_regain_access":%d}]}`,
			account, pct(acct), pct(acct), pct(acct), regain))
	}
	return a
}
