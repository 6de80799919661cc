package profiles

import (
	"time"

	"github.com/throttle-go/throttle"
)

// ShopifyPlan is a store's Shopify plan, which sets its REST Admin API's
// leaky bucket.
type ShopifyPlan int

const (
	// ShopifyStandard: a bucket of 40 requests that leaks 2 per second.
	ShopifyStandard ShopifyPlan = iota
	// ShopifyPlus: a bucket of 400 that leaks 20 per second.
	ShopifyPlus
)

// Shopify returns the rule of Shopify's REST Admin API (*.myshopify.com)
// for an app's access token on one store, on plan: a leaky bucket, sent as
// a paced limit with the bucket's size as its burst. Documented at
// shopify.dev, "REST Admin API rate limits", as of 2026-05.
func Shopify(plan ShopifyPlan) throttle.Rule {
	size, perSecond := 40, 2
	if plan == ShopifyPlus {
		size, perSecond = 400, 20
	}
	return throttle.Rule{
		Name:   "shopify",
		Host:   "*.myshopify.com",
		Key:    throttle.ByHeader("X-Shopify-Access-Token"),
		Limits: []throttle.Limit{throttle.Paced(size, time.Duration(size/perSecond)*time.Second, size-1)},
	}
}
