package throttletest

import (
	"net/http"
	"strconv"
	"time"
)

// hubspotDaily is HubSpot's daily allocation per burst limit: 250,000 a
// day beside 100 per 10 seconds (private apps, Free and Starter).
const hubspotDaily = 2500

// NewHubSpot returns a fake of HubSpot's API, counting per app token (the
// Authorization header, unless Config.Key says otherwise) as HubSpot
// documents (developers.hubspot.com, "API usage guidelines and limits", as
// of 2026-11):
//
//   - the burst limit: N requests per rolling Window (zero: 100 per 10
//     seconds);
//   - the daily limit: 2,500×N requests (250,000) per day, which starts at
//     midnight UTC.
//
// Every answer carries X-HubSpot-RateLimit-Max, -Remaining,
// -Interval-Milliseconds, -Daily and -Daily-Remaining; a request beyond
// either limit is answered 429 with HubSpot's RATE_LIMIT error, whose
// policyName says which (TEN_SECONDLY_ROLLING or DAILY).
func NewHubSpot(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewHubSpot")
	}
	return newAPI("NewHubSpot", cfg, 100, 10*time.Second, keyHeader("Authorization"),
		&hubspot{burst: map[string]*costLog{}, daily: map[string]*fixedWindow{}})
}

type hubspot struct {
	burst map[string]*costLog
	daily map[string]*fixedWindow
}

func (h *hubspot) answer(u *Upstream, r *http.Request, now time.Time) answer {
	key := u.cfg.Key(r)
	b := h.burst[key]
	if b == nil {
		b = &costLog{}
		h.burst[key] = b
	}
	b.trim(now, u.cfg.Window)
	d := h.daily[key]
	if d == nil {
		d = &fixedWindow{}
		h.daily[key] = d
	}
	d.at(now, func(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour) })
	daily := hubspotDaily * u.cfg.N

	a := answer{key: key, verdict: refused, status: http.StatusTooManyRequests, header: http.Header{}}
	switch {
	case d.used >= daily:
		a.body = `{"status":"error","message":"You have reached your daily limit.","errorType":"RATE_LIMIT","policyName":"DAILY"}`
	case b.sum >= u.cfg.N:
		a.body = `{"status":"error","message":"You have reached your ten_secondly_rolling limit.","errorType":"RATE_LIMIT","policyName":"TEN_SECONDLY_ROLLING"}`
	default:
		b.add(now, 1)
		d.used++
		a.verdict, a.status, a.body = accepted, http.StatusOK, `{"results":[]}`
	}
	a.header.Set("X-Hubspot-Ratelimit-Max", strconv.Itoa(u.cfg.N))
	a.header.Set("X-Hubspot-Ratelimit-Remaining", strconv.Itoa(u.cfg.N-b.sum))
	a.header.Set("X-Hubspot-Ratelimit-Interval-Milliseconds", strconv.FormatInt(u.cfg.Window.Milliseconds(), 10))
	a.header.Set("X-Hubspot-Ratelimit-Daily", strconv.Itoa(daily))
	a.header.Set("X-Hubspot-Ratelimit-Daily-Remaining", strconv.Itoa(daily-d.used))
	return a
}
