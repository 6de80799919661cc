package throttletest

import (
	"net/http"
	"time"
)

// NewGoogleMaps returns a fake of Google Maps Platform's web services as
// their JSON answers (developers.google.com/maps, "Geocoding API: Status
// codes", as of 2026-05): N requests per Window per API key (the key query
// parameter, unless Config.Key says otherwise; zero: 3,000 per minute, the
// default quota), in windows aligned as Google's quota minutes are: a new
// one starts at second 00 (at each multiple of Window since the Unix
// epoch). A request beyond the quota is answered 200 with
// "status": "OVER_QUERY_LIMIT" in its body, without Retry-After; an
// accepted one 200 with "status": "OK".
func NewGoogleMaps(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewGoogleMaps")
	}
	return newAPI("NewGoogleMaps", cfg, 3000, time.Minute, keyQuery("key", ""),
		&googleMaps{windows: map[string]*fixedWindow{}})
}

type googleMaps struct {
	windows map[string]*fixedWindow
}

func (g *googleMaps) answer(u *Upstream, r *http.Request, now time.Time) answer {
	key := u.cfg.Key(r)
	fw := g.windows[key]
	if fw == nil {
		fw = &fixedWindow{}
		g.windows[key] = fw
	}
	w := int64(u.cfg.Window)
	fw.at(now, func(t time.Time) time.Time { return time.Unix(0, (t.UnixNano()/w+1)*w) })
	if fw.used >= u.cfg.N {
		return answer{key: key, verdict: refused, status: http.StatusOK,
			body: `{"error_message":"You have exceeded your rate-limit for this API.","results":[],"status":"OVER_QUERY_LIMIT"}`}
	}
	fw.used++
	return answer{key: key, verdict: accepted, status: http.StatusOK, body: `{"results":[],"status":"OK"}`}
}
