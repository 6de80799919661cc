package profiles

import (
	"net/http"
	"strings"

	"github.com/throttle-go/throttle"
)

// Discord returns the rule of Discord's HTTP API (discord.com/api/) for a
// bot token: the global limit of 50 requests per second per token, and a
// key per route (its method and path, ids left out but for the major
// parameter: the id after channels, guilds or webhooks), whose bucket is
// learned from the route's first response (X-RateLimit-Limit per
// X-RateLimit-Reset-After) and kept by the whole fleet, as evenly spaced
// sends. Routes that share a bucket (X-RateLimit-Bucket) are still keyed
// apart. Documented at discord.com/developers/docs/topics/rate-limits, as
// of 2026-05.
func Discord() throttle.Rule {
	return throttle.Rule{
		Name:       "discord",
		Host:       "discord.com",
		PathPrefix: "/api/",
		Key:        discordRoute(throttle.ByAuthorization()),
		Limits:     []throttle.Limit{throttle.PerSecond(50)},
		Also: []throttle.KeyLimit{{
			Name:   "global",
			Key:    throttle.ByAuthorization(),
			Limits: []throttle.Limit{throttle.PerSecond(50)},
		}},
	}
}

// discordRoute keys a request as key does, followed by its route: the
// method and the path after the API's version, each all-digit segment
// (an id) replaced by "{id}" but for the first major parameter, which
// Discord counts apart.
func discordRoute(key throttle.KeyFunc) throttle.KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		if err != nil {
			return k, err
		}
		segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		major := false
		for i, s := range segs {
			if s == "" || strings.Trim(s, "0123456789") != "" {
				continue
			}
			if !major && i > 0 && (segs[i-1] == "channels" || segs[i-1] == "guilds" || segs[i-1] == "webhooks") {
				major = true
				continue
			}
			segs[i] = "{id}"
		}
		return k + ":" + r.Method + " /" + strings.Join(segs, "/"), nil
	}
}
