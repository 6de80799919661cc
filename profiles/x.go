package profiles

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
)

// X returns the rule of X's API v2 (api.x.com) for one endpoint's limits:
// per15Minutes requests per 15 minutes and, unless per24Hours is 0,
// per24Hours per 24 hours, counted per token and endpoint, as X counts them
// (per user with a user's token, per app with the app's bearer token). An
// endpoint is the method and the path, each all-digit segment after the
// version (an id) replaced by "{id}". The limits depend on the endpoint and the access
// tier (Free, Basic, Pro): give the figures of the endpoints the rule
// matches, or narrow it with PathPrefix and Method, one rule per group of
// equal limits. X states "up to 900 requests over any 15-minute interval",
// so the rule sends in bursts as a rolling window allows (NoDefaultPace);
// x-rate-limit-* and the 24-hour x-user-limit-24hour-* and
// x-app-limit-24hour-* are read as budgets. An OAuth 1.0a request (a
// signature that changes each time) is keyed by its oauth_token, else its
// oauth_consumer_key. Documented at docs.x.com, "Rate limits" (X API v2),
// as of 2026-11.
func X(per15Minutes, per24Hours int) throttle.Rule {
	limits := []throttle.Limit{throttle.Per(per15Minutes, 15*time.Minute)}
	if per24Hours > 0 {
		limits = append(limits, throttle.Per(per24Hours, 24*time.Hour))
	}
	return throttle.Rule{
		Name:          "x",
		Host:          "api.x.com",
		PathPrefix:    "/2/",
		Key:           xEndpoint(throttle.FirstOf(oauth1Token, throttle.ByAuthorization())),
		Limits:        limits,
		NoDefaultPace: true,
		MaxServerWait: 15 * time.Minute,
	}
}

// xEndpoint keys a request as key does, followed by its endpoint: the
// method and the path with each all-digit segment after the version
// replaced by "{id}".
func xEndpoint(key throttle.KeyFunc) throttle.KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		if err != nil {
			return k, err
		}
		segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		for i, s := range segs {
			if i > 0 && s != "" && strings.Trim(s, "0123456789") == "" { // not the version, 2
				segs[i] = "{id}"
			}
		}
		return k + ":" + r.Method + " /" + strings.Join(segs, "/"), nil
	}
}

// oauth1Token keys an OAuth 1.0a request by its oauth_token (the user's
// access token), else its oauth_consumer_key (the app), hashed: its
// signature and nonce change with every request.
func oauth1Token(r *http.Request) (string, error) {
	v := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, params, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "OAuth") {
		return "", nil // FirstOf tries the next
	}
	var consumer string
	for _, p := range strings.Split(params, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		val = strings.Trim(val, `"`)
		switch name {
		case "oauth_token":
			if val != "" {
				return hashKey("oauth-token:", val), nil
			}
		case "oauth_consumer_key":
			consumer = val
		}
	}
	if consumer != "" {
		return hashKey("oauth-consumer:", consumer), nil
	}
	return "", nil
}

// hashKey returns prefix and the first 128 bits of the SHA-256 of v, in
// hex, as throttle's own key functions hash a credential.
func hashKey(prefix, v string) string {
	sum := sha256.Sum256([]byte(v))
	return prefix + hex.EncodeToString(sum[:16])
}
