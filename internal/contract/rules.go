package contract

import (
	"context"
	"time"
)

// Rules is the part of a store that keeps the rules each process runs, as
// it publishes them, for the operator's tools: one record per process,
// opaque to the store, that expires unless published again.
type Rules interface {
	// PublishRules records doc under process for ttl, replacing its
	// previous record. doc is at most MaxRulesDoc bytes.
	PublishRules(ctx context.Context, process string, doc []byte, ttl time.Duration) error
	// UnpublishRules removes the record of process, if any.
	UnpublishRules(ctx context.Context, process string) error
	// PublishedRules returns every record that has not expired, by process.
	PublishedRules(ctx context.Context) (map[string][]byte, error)
}

// MaxRulesDoc bounds one process's record of its rules.
const MaxRulesDoc = 64 << 10
