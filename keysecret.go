package throttle

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// MinKeySecretLen is the shortest secret WithKeySecret accepts.
const MinKeySecretLen = 16

// WithKeySecret makes the transport replace every rate key with
// "hmac:" and the first 128 bits of HMAC-SHA256(secret, key), in hex, before
// it reaches the store, the decisions, the logs and the errors.
//
// Without a secret, a key derived from a token is a plain SHA-256 of it: anyone
// who can read Redis (or a log) can test a guessed token offline by hashing
// it. With a secret, they also need the secret. Every process that shares the
// limits must use the same secret, or their keys differ and they stop sharing;
// changing it starts every log afresh. Keys that were readable (host names,
// Fixed names) become opaque too; the rule's name stays in the decisions and
// in the Redis key.
//
// The secret must be at least MinKeySecretLen bytes (32 random bytes are
// best); it is copied.
func WithKeySecret(secret []byte) Option {
	return optionFunc(func(t *Transport) error {
		if len(secret) < MinKeySecretLen {
			return &ConfigError{Reason: fmt.Sprintf("WithKeySecret: the secret has %d bytes; it needs at least %d", len(secret), MinKeySecretLen)}
		}
		t.keySecret = append([]byte(nil), secret...)
		return nil
	})
}

// storeKey is the rate key as the transport stores and reports it: keyed with
// the secret when there is one, else hashed when longer than MaxKeyLen.
func (t *Transport) storeKey(key string) string {
	if t.keySecret != nil {
		m := hmac.New(sha256.New, t.keySecret)
		m.Write([]byte(key))
		return "hmac:" + hex.EncodeToString(m.Sum(nil)[:16])
	}
	if len(key) > MaxKeyLen {
		return hashed("sha256:", key)
	}
	return key
}
