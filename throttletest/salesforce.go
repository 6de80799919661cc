package throttletest

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// NewSalesforce returns a fake of an org's Salesforce REST API, counting
// per org (the request's host, unless Config.Key says otherwise) as
// Salesforce documents (developer.salesforce.com, "API Request Limits and
// Allocations" and "Limit Info Header", as of 2026-11): N requests per
// rolling Window (zero: 100,000 per 24 hours), the org's allocation. Every
// answer carries Sforce-Limit-Info: api-usage=used/N; a request beyond the
// allocation is answered 403 with the error code REQUEST_LIMIT_EXCEEDED.
func NewSalesforce(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewSalesforce")
	}
	return newAPI("NewSalesforce", cfg, 100_000, 24*time.Hour, keyHost,
		&salesforce{orgs: map[string]*costLog{}})
}

type salesforce struct {
	orgs map[string]*costLog
}

func (s *salesforce) answer(u *Upstream, r *http.Request, now time.Time) answer {
	key := u.cfg.Key(r)
	l := s.orgs[key]
	if l == nil {
		l = &costLog{}
		s.orgs[key] = l
	}
	l.trim(now, u.cfg.Window)
	a := answer{key: key, verdict: refused, status: http.StatusForbidden, header: http.Header{},
		body: `[{"message":"TotalRequests Limit exceeded.","errorCode":"REQUEST_LIMIT_EXCEEDED"}]`}
	if l.sum < u.cfg.N {
		l.add(now, 1)
		a.verdict, a.status, a.body = accepted, http.StatusOK, `{"totalSize":0,"done":true,"records":[]}`
	}
	a.header.Set("Sforce-Limit-Info", fmt.Sprintf("api-usage=%d/%d", l.sum, u.cfg.N))
	return a
}

// keyHost keys by the request's host, without a port.
func keyHost(r *http.Request) string {
	h := r.Host
	if h == "" {
		h = r.URL.Host
	}
	if name, _, err := net.SplitHostPort(h); err == nil {
		return name
	}
	return h
}
