package throttletest

import (
	"net/http"
	"strconv"
	"time"
)

// NewStripe returns a fake of Stripe's API, counting per secret key (the
// Authorization header, unless Config.Key says otherwise) as Stripe
// documents (docs.stripe.com, "Rate limits", as of 2026-05): a token
// bucket of N requests refilled at N per Window (zero: 100 per second,
// live mode's rate). A request the bucket refuses is answered 429 with
// Stripe-Rate-Limited-Reason: global-rate and an error of type
// rate_limit_error. A request that changes an object (any method but GET
// on /v1/<kind>/<id>…) while another request on the same object is in
// flight (for ServiceTime) is answered 429 with the error code
// lock_timeout and Stripe-Should-Retry: true: the object is locked, which
// is no rate limit, and the request counts neither as accepted nor as
// rejected.
func NewStripe(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewStripe")
	}
	s := &stripe{buckets: map[string]*bucket{}, locked: map[string]bool{}}
	u, err := newAPI("NewStripe", cfg, 100, time.Second, keyHeader("Authorization"), s)
	if err != nil {
		return nil, err
	}
	if u.cfg.Window/time.Duration(u.cfg.N) <= 0 {
		return nil, errSpacing("NewStripe")
	}
	return u, nil
}

type stripe struct {
	buckets map[string]*bucket
	locked  map[string]bool // objects a request is changing now
}

func (s *stripe) answer(u *Upstream, r *http.Request, now time.Time) answer {
	key := u.cfg.Key(r)
	object := ""
	if segs := segments(r.URL.Path); r.Method != http.MethodGet && len(segs) >= 3 {
		object = segs[1] + "/" + segs[2]
	}
	if object != "" && s.locked[object] {
		h := http.Header{}
		h.Set("Stripe-Should-Retry", "true")
		return answer{key: key, verdict: neither, status: http.StatusTooManyRequests, header: h,
			body: `{"error":{"code":"lock_timeout","message":"This object cannot be accessed right now because another API request or Stripe process is currently accessing it.","type":"invalid_request_error"}}`}
	}
	b := s.buckets[key]
	if b == nil {
		b = &bucket{}
		s.buckets[key] = b
	}
	if ok, retry := b.take(now, u.cfg.Window/time.Duration(u.cfg.N), u.cfg.N-1); !ok {
		h := http.Header{}
		h.Set("Stripe-Rate-Limited-Reason", "global-rate")
		h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(retry)), 10))
		return answer{key: key, verdict: refused, status: http.StatusTooManyRequests, header: h,
			body: `{"error":{"message":"Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.","type":"invalid_request_error","code":"rate_limit"}}`}
	}
	a := answer{key: key, verdict: accepted, status: http.StatusOK, body: `{"object":"charge"}`}
	if object != "" {
		s.locked[object] = true
		a.done = func() { delete(s.locked, object) }
	}
	return a
}
