package throttle

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// A KeyFunc derives the rate key of a request: the name of the log its sends
// are counted in. Requests with the same key share their rule's limits, across
// every process that uses the same store.
//
// A KeyFunc must not modify the request. When no key can be derived it returns
// an error, and the request is refused with a *KeyError carrying that error's
// text, so the text must never include a secret. Keys longer than 200 bytes are
// hashed by the transport, so a KeyFunc may return any non-empty string.
type KeyFunc func(*http.Request) (string, error)

// maxKeyLen is the longest rate key stored as it is; a longer one is replaced
// by "sha256:" and the hex digest of its first 128 bits.
const maxKeyLen = 200

// keyErr is the error of the built-in KeyFuncs: its text is the reason.
type keyErr string

func (e keyErr) Error() string { return string(e) }

// hashed returns prefix and the first 128 bits of the SHA-256 of secret, in
// hex: enough to tell tokens apart, and nothing that gives a token back.
func hashed(prefix, secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return prefix + hex.EncodeToString(sum[:16])
}

// requestHost returns the host name of req, lower-cased, without brackets
// (IPv6) or a trailing dot, and its port, empty when the URL has none. It
// reads URL.Host, or Host when URL.Host is empty.
func requestHost(req *http.Request) (host, port string) {
	h := req.URL.Host
	if h == "" {
		h = req.Host
	}
	return splitHost(h)
}

// splitHost splits "host", "host:port", "[v6]" or "[v6]:port".
func splitHost(hostport string) (host, port string) {
	u := url.URL{Host: hostport}
	return strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), u.Port()
}

// ByHost keys a request by its host name, lower-cased and without a port:
// one log per upstream host.
func ByHost() KeyFunc {
	return func(r *http.Request) (string, error) {
		host, _ := requestHost(r)
		if host == "" {
			return "", keyErr("the request has no host")
		}
		return "host:" + host, nil
	}
}

// ByHeader keys a request by the value of a header, hashed: an API key, a
// tenant. A request without the header, or with an empty value, has no key.
func ByHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", keyErr("no " + name + " header")
		}
		return hashed("header:"+name+":", v), nil
	}
}

// ByBearerToken keys a request by the bearer token of its Authorization
// header, hashed: one log per access token. It refuses any other scheme with
// a *KeyError; ByAuthorization, which keys any scheme and gives the same key
// for a bearer token, is the usual choice.
func ByBearerToken() KeyFunc {
	auth := ByAuthorization() // the same parse, so that both give one key
	return func(r *http.Request) (string, error) {
		v := strings.TrimLeft(r.Header.Get("Authorization"), " \t")
		if strings.TrimSpace(v) == "" {
			return "", keyErr(noAuthorization)
		}
		i := strings.IndexAny(v, " \t")
		if i < 0 || !strings.EqualFold(v[:i], "Bearer") || strings.TrimSpace(v[i+1:]) == "" {
			return "", keyErr("the Authorization header is not a bearer token (ByAuthorization keys any scheme)")
		}
		return auth(r)
	}
}

// ByAuthorization keys a request by the credential of its Authorization
// header, whatever its scheme, hashed: one log per access token, whether it
// is sent as "Bearer …", as GitHub's "token …" or as "Basic …". Use it for
// any API that authenticates with this header; use ByHeader("Authorization")
// for a bare key sent with no scheme.
//
// The scheme is not part of the key: GitHub accepts a token as "token X" or
// "Bearer X" and counts both against the same limit, so both get the same
// key, which is also ByBearerToken's, so that a fleet may switch from one to
// the other as it runs. A header that is missing, is one word (a scheme
// without a credential, or a bare key), has an empty credential, or uses a
// scheme that signs every request (Digest, OAuth 1.0, Signature, HOBA, AWS
// Signature Version 4: the credential changes each time, so each request
// would have its own log) gives a *KeyError; key those by their stable part
// (the user, the access key) with a KeyFunc of your own. No reason holds
// the credential.
func ByAuthorization() KeyFunc {
	return func(r *http.Request) (string, error) {
		v := strings.TrimLeft(r.Header.Get("Authorization"), " \t")
		if strings.TrimSpace(v) == "" {
			return "", keyErr(noAuthorization)
		}
		i := strings.IndexAny(v, " \t")
		if i < 0 {
			return "", keyErr(`the Authorization header is one word, not a scheme and a credential ` +
				`(for a key sent with no scheme, use ByHeader("Authorization"))`)
		}
		scheme, cred := v[:i], strings.TrimSpace(v[i+1:])
		if signs := signingScheme(scheme); signs != "" {
			return "", keyErr("the Authorization scheme " + signs + " signs every request, so its credential cannot key a log: " +
				"key such requests by their stable part with a KeyFunc of your own")
		}
		if cred == "" {
			return "", keyErr("the Authorization header has an empty credential")
		}
		return hashed(authPrefix, cred), nil
	}
}

// authPrefix starts the keys of ByAuthorization and ByBearerToken.
const authPrefix = "bearer:"

// noAuthorization is the reason of ByAuthorization and ByBearerToken for a
// request without the header: most often a transport that adds it sits
// under the throttle instead of wrapping it.
const noAuthorization = "no Authorization header (a transport that adds it, such as oauth2.Transport, " +
	"must wrap the throttle's Transport, not be its base)"

// signingScheme returns the name of scheme, a case-insensitive HTTP
// authentication scheme, if its credential changes with every request, and
// "" otherwise. The name returned is the constant's, never the header's.
func signingScheme(scheme string) string {
	for _, s := range []string{"Digest", "OAuth", "Signature", "HOBA"} {
		if strings.EqualFold(scheme, s) {
			return s
		}
	}
	if len(scheme) >= 5 && strings.EqualFold(scheme[:5], "AWS4-") {
		return "AWS4 (AWS Signature Version 4)"
	}
	return ""
}

// ByQuery keys a request by a query parameter, hashed: Instagram's and
// Facebook's access_token, for example. A request without it has no key.
func ByQuery(param string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.URL.Query().Get(param)
		if v == "" {
			return "", keyErr("no " + param + " query parameter")
		}
		return hashed("query:"+param+":", v), nil
	}
}

// Fixed keys every request by the same name: a payment gateway, whose limit
// covers all of our calls to it.
func Fixed(name string) KeyFunc {
	return func(*http.Request) (string, error) {
		if name == "" {
			return "", keyErr("Fixed was given an empty name")
		}
		return name, nil
	}
}

// FirstOf tries each KeyFunc in turn and returns the first key derived: for
// example ByAuthorization, then ByHost for requests without a token.
//
// A nil KeyFunc among fs refuses every request with a *KeyError saying so
// (a KeyFunc cannot return a configuration error).
func FirstOf(fs ...KeyFunc) KeyFunc {
	for i, f := range fs {
		if f == nil {
			return func(*http.Request) (string, error) {
				return "", keyErr(fmt.Sprintf("FirstOf: key function %d of %d is nil", i+1, len(fs)))
			}
		}
	}
	return func(r *http.Request) (string, error) {
		reasons := make([]string, 0, len(fs))
		for _, f := range fs {
			k, err := f(r)
			if err == nil && k != "" {
				return k, nil
			}
			if err != nil {
				reasons = append(reasons, err.Error())
			}
		}
		if len(reasons) == 0 {
			return "", keyErr("no key function derived a key")
		}
		return "", keyErr(strings.Join(reasons, "; "))
	}
}

// storeKey is the rate key as the transport stores and reports it: keyed with
// the secret when there is one (WithKeySecret), else hashed when longer than
// maxKeyLen.
func (c *core) storeKey(key string) string {
	if c.keySecret != nil {
		m := hmac.New(sha256.New, c.keySecret)
		m.Write([]byte(key))
		return "hmac:" + hex.EncodeToString(m.Sum(nil)[:16])
	}
	if len(key) > maxKeyLen {
		return hashed("sha256:", key)
	}
	return key
}

// credentialKey returns the rate key that a built-in KeyFunc derives from a
// request carrying credential (operator.CredentialKey): by is "bearer",
// "query:<param>" or "header:<Name>". No error holds the credential.
func credentialKey(by, credential string) (string, error) {
	if credential == "" {
		return "", &KeyError{Reason: "empty credential"}
	}
	kind, arg, _ := strings.Cut(by, ":")
	switch {
	case kind == "bearer" && arg == "":
		// As ByAuthorization reads it: the header's spaces are not the token's.
		if credential = strings.TrimSpace(credential); credential == "" {
			return "", &KeyError{Reason: "empty credential"}
		}
		return hashed(authPrefix, credential), nil
	case kind == "query" && arg != "":
		return hashed("query:"+arg+":", credential), nil
	case kind == "header" && arg != "":
		return hashed("header:"+http.CanonicalHeaderKey(arg)+":", credential), nil
	}
	return "", &KeyError{Reason: fmt.Sprintf("unknown key kind %q (want bearer, query:<param> or header:<Name>)", by)}
}
