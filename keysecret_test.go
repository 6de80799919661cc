package throttle_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
)

var keySecret = []byte("k3y-s3cret-0123456789abcdef-XYZ!")

// TestKeySecret: with a secret, every stored and reported key is an HMAC of
// the derived key; transports sharing the secret share their logs, and other
// secrets (or none) give other keys.
func TestKeySecret(t *testing.T) {
	rule := throttle.Rule{Name: "tok", Host: "api.example.com", Limits: []throttle.Limit{throttle.PerHour(1)},
		Key: throttle.ByBearerToken(), Mode: throttle.FailFast}
	st := newMemory(t)
	keyOf := func(tr *throttle.Transport, decisions *decisionLog) (string, error) {
		req, _ := newRequest(t, context.Background(), http.MethodGet, testURL)
		_, err := tr.RoundTrip(req)
		return decisions.last(t).Key, err
	}
	var d1, d2, d3, d4 decisionLog
	var sent sendLog
	a := newTransport(t, sent.base(), st, throttle.WithRule(rule), d1.option(), throttle.WithKeySecret(keySecret))
	b := newTransport(t, sent.base(), st, throttle.WithRule(rule), d2.option(), throttle.WithKeySecret(append([]byte(nil), keySecret...)))
	other := newTransport(t, sent.base(), st, throttle.WithRule(rule), d3.option(), throttle.WithKeySecret([]byte("another-secret-of-32-bytes-long!")))
	plain := newTransport(t, sent.base(), st, throttle.WithRule(rule), d4.option())

	ka, err := keyOf(a, &d1)
	require.NoError(t, err)
	kb, err := keyOf(b, &d2)
	assert.ErrorIs(t, err, throttle.ErrLimited, "the same secret: the same log, across transports (and processes)")
	assert.Equal(t, ka, kb)
	ko, err := keyOf(other, &d3)
	assert.NoError(t, err, "another secret: another log")
	kp, err := keyOf(plain, &d4)
	assert.NoError(t, err)

	// The key is HMAC-SHA256(secret, the KeyFunc's key), 128 bits in hex.
	derived, err := throttle.ByBearerToken()(keyReq(t, "https://api.example.com", "Authorization", "Bearer "+secret))
	require.NoError(t, err)
	assert.Equal(t, derived, kp)
	m := hmac.New(sha256.New, keySecret)
	m.Write([]byte(derived))
	assert.Equal(t, "hmac:"+hex.EncodeToString(m.Sum(nil)[:16]), ka)
	assert.NotEqual(t, ka, ko)
	for _, k := range []string{ka, ko} {
		assert.Len(t, k, len("hmac:")+32)
		assert.NotContains(t, k, strings.TrimPrefix(derived, "bearer:"))
	}
	// Pinned: a change would split every fleet's logs during a deploy.
	var dp decisionLog
	pin := newTransport(t, sent.base(), nil, throttle.WithKeySecret([]byte("0123456789abcdef")), dp.option(),
		throttle.WithRule(throttle.Rule{Host: "a.example.com", Limits: rule.Limits, Key: throttle.Fixed("pg1")}))
	req, _ := newRequest(t, context.Background(), http.MethodGet, "https://a.example.com/")
	_, err = pin.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, "hmac:a0fab1e674e8c797e4f6bcbd9e3a917b", dp.last(t).Key)

	// A huge key is keyed too: bounded.
	huge := newTransport(t, sent.base(), nil, throttle.WithKeySecret(keySecret), d1.option(),
		throttle.WithRule(throttle.Rule{Host: "a.example.com", Limits: rule.Limits, Key: throttle.Fixed(strings.Repeat("x", 1<<20))}))
	req, _ = newRequest(t, context.Background(), http.MethodGet, "https://a.example.com/")
	_, err = huge.RoundTrip(req)
	require.NoError(t, err)
	assert.Len(t, d1.last(t).Key, len("hmac:")+32)
}
