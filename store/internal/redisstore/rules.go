package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
)

// The rules the processes publish (contract.Rules), in plain commands: one
// STRING per process, p + "rules:" + process, that expires with its TTL, and
// an index, the HASH p + "rules", of process → the time its record expires
// (Unix ms, on the publisher's clock), which lists them without a SCAN. A
// publish drops from the index the processes whose records expired a TTL
// ago, so that it stays as small as the fleet; the index itself expires a
// TTL after the last publish. Neither name starts with "{", so no rate key's
// Redis key (p{…}) can be one of them.

var _ contract.Rules = (*Redis)(nil)

func (r *Redis) rulesIndex() string             { return r.prefix + "rules" }
func (r *Redis) rulesKey(process string) string { return r.prefix + "rules:" + process }

func (r *Redis) cmdable(op string) (redis.Cmdable, error) {
	c, ok := r.client.(redis.Cmdable)
	if !ok {
		return nil, fmt.Errorf("store: redis %s: the client (%T) cannot run plain commands", op, r.client)
	}
	return c, nil
}

// PublishRules implements contract.Rules.
func (r *Redis) PublishRules(ctx context.Context, process string, doc []byte, ttl time.Duration) error {
	if process == "" || len(doc) > contract.MaxRulesDoc || ttl < time.Millisecond {
		return fmt.Errorf("%w: a record of rules needs a process, at most %d bytes and a TTL of 1ms or more", contract.ErrInvalidRequest, contract.MaxRulesDoc)
	}
	c, err := r.cmdable("publish rules")
	if err != nil {
		return err
	}
	now := time.Now()
	idx := r.rulesIndex()
	// One round trip (one per Cluster node): a record, its place in the
	// index, and the index, to drop the processes gone.
	var index *redis.MapStringStringCmd
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.rulesKey(process), doc, ttl)
		p.HSet(ctx, idx, process, now.Add(ttl).UnixMilli())
		p.PExpire(ctx, idx, ttl)
		index = p.HGetAll(ctx, idx)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: redis publish rules: %w", err)
	}
	all := index.Val()
	var stale []string
	for p, v := range all {
		if ms, err := strconv.ParseInt(v, 10, 64); err != nil || ms < now.Add(-ttl).UnixMilli() {
			stale = append(stale, p)
		}
	}
	if len(stale) > 0 {
		if err := c.HDel(ctx, idx, stale...).Err(); err != nil {
			return fmt.Errorf("store: redis publish rules: %w", err)
		}
	}
	return nil
}

// UnpublishRules implements contract.Rules.
func (r *Redis) UnpublishRules(ctx context.Context, process string) error {
	c, err := r.cmdable("unpublish rules")
	if err != nil {
		return err
	}
	if err := c.Del(ctx, r.rulesKey(process)).Err(); err != nil {
		return fmt.Errorf("store: redis unpublish rules: %w", err)
	}
	if err := c.HDel(ctx, r.rulesIndex(), process).Err(); err != nil {
		return fmt.Errorf("store: redis unpublish rules: %w", err)
	}
	return nil
}

// PublishedRules implements contract.Rules.
func (r *Redis) PublishedRules(ctx context.Context) (map[string][]byte, error) {
	c, err := r.cmdable("published rules")
	if err != nil {
		return nil, err
	}
	all, err := c.HGetAll(ctx, r.rulesIndex()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: redis published rules: %w", err)
	}
	out := make(map[string][]byte, len(all))
	for p := range all {
		doc, err := c.Get(ctx, r.rulesKey(p)).Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			continue // expired: the process stopped publishing
		case err != nil:
			return nil, fmt.Errorf("store: redis published rules: %w", err)
		}
		out[p] = doc
	}
	return out, nil
}
