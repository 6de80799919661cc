package throttletest

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// NewShopify returns a fake of Shopify's REST Admin API, counting per
// access token (the X-Shopify-Access-Token header, unless Config.Key says
// otherwise) as Shopify documents (shopify.dev, "REST Admin API rate
// limits", as of 2026-05): a leaky bucket of N requests that leaks N per
// Window (zero: 40 leaking 2 per second, N 40 per 20s; Shopify Plus is
// 400 per 20s). Every answer carries X-Shopify-Shop-Api-Call-Limit:
// used/N; a request that finds the bucket full is answered 429 with
// Retry-After in seconds with a fraction (2.0).
func NewShopify(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewShopify")
	}
	s := &shopify{buckets: map[string]*bucket{}}
	u, err := newAPI("NewShopify", cfg, 40, 20*time.Second, keyHeader("X-Shopify-Access-Token"), s)
	if err != nil {
		return nil, err
	}
	if u.cfg.Window/time.Duration(u.cfg.N) <= 0 {
		return nil, errSpacing("NewShopify")
	}
	return u, nil
}

type shopify struct {
	buckets map[string]*bucket
}

func (s *shopify) answer(u *Upstream, r *http.Request, now time.Time) answer {
	key := u.cfg.Key(r)
	b := s.buckets[key]
	if b == nil {
		b = &bucket{}
		s.buckets[key] = b
	}
	t := u.cfg.Window / time.Duration(u.cfg.N)
	ok, retry := b.take(now, t, u.cfg.N-1)
	h := http.Header{}
	h.Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", b.fill(now, t), u.cfg.N))
	if !ok {
		tenths := (retry + 100*time.Millisecond - 1) / (100 * time.Millisecond)
		h.Set("Retry-After", strconv.FormatFloat(float64(tenths)/10, 'f', 1, 64))
		return answer{key: key, verdict: refused, status: http.StatusTooManyRequests, header: h,
			body: `{"errors":"Exceeded 2 calls per second for api client. Reduce request rates to resume uninterrupted service."}`}
	}
	return answer{key: key, verdict: accepted, status: http.StatusOK, header: h, body: `{"orders":[]}`}
}
