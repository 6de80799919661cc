package throttle

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

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
