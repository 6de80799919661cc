package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
)

// The limits an operator sets at runtime (contract.Overrides), in plain
// commands: one STRING per rule, p + "override:{" + rule + "}", with the
// override's TTL, and its history, the LIST p + "override:{" + rule + "}:log",
// newest first, trimmed to contract.MaxOverrideHistory. The braces put both
// in one Cluster slot, so that a set or a clear writes them in one
// MULTI/EXEC; no name starts with "{", so no rate key's Redis key (p{…})
// can be one of them.

var _ contract.Overrides = (*Redis)(nil)

func (r *Redis) overrideKey(rule string) string { return r.prefix + "override:{" + rule + "}" }
func (r *Redis) historyKey(rule string) string  { return r.overrideKey(rule) + ":log" }

func checkOverride(rule string, docs ...[]byte) error {
	if rule == "" {
		return fmt.Errorf("%w: an override needs a rule name", contract.ErrInvalidRequest)
	}
	for _, d := range docs {
		if len(d) == 0 || len(d) > contract.MaxOverrideDoc {
			return fmt.Errorf("%w: an override's record and history entry take 1 to %d bytes", contract.ErrInvalidRequest, contract.MaxOverrideDoc)
		}
	}
	return nil
}

// SetOverride implements contract.Overrides.
func (r *Redis) SetOverride(ctx context.Context, rule string, doc []byte, ttl time.Duration, entry []byte) error {
	if err := checkOverride(rule, doc, entry); err != nil {
		return err
	}
	if ttl < 0 || (ttl > 0 && ttl < time.Millisecond) {
		return fmt.Errorf("%w: an override lasts 1ms or more, or until cleared (0)", contract.ErrInvalidRequest)
	}
	c, err := r.cmdable("set override")
	if err != nil {
		return err
	}
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.overrideKey(rule), doc, ttl) // 0: no expiry
		r.addHistory(ctx, p, rule, entry)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: redis set override: %w", err)
	}
	return nil
}

func (r *Redis) addHistory(ctx context.Context, p redis.Pipeliner, rule string, entry []byte) {
	h := r.historyKey(rule)
	p.LPush(ctx, h, entry)
	p.LTrim(ctx, h, 0, contract.MaxOverrideHistory-1)
}

// ClearOverride implements contract.Overrides.
func (r *Redis) ClearOverride(ctx context.Context, rule string, entry []byte) error {
	if err := checkOverride(rule, entry); err != nil {
		return err
	}
	c, err := r.cmdable("clear override")
	if err != nil {
		return err
	}
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.overrideKey(rule))
		r.addHistory(ctx, p, rule, entry)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: redis clear override: %w", err)
	}
	return nil
}

// Overrides implements contract.Overrides: one pipeline of GETs, which a
// Cluster client splits by node.
func (r *Redis) Overrides(ctx context.Context, rules []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if len(rules) == 0 {
		return out, nil
	}
	c, err := r.cmdable("overrides")
	if err != nil {
		return nil, err
	}
	cmds := make([]*redis.StringCmd, len(rules))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range rules {
			cmds[i] = p.Get(ctx, r.overrideKey(name))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: redis overrides: %w", err)
	}
	return overridesOf(rules, cmds) // ride.go
}

// OverrideHistory implements contract.Overrides.
func (r *Redis) OverrideHistory(ctx context.Context, rule string) ([][]byte, error) {
	c, err := r.cmdable("override history")
	if err != nil {
		return nil, err
	}
	all, err := c.LRange(ctx, r.historyKey(rule), 0, contract.MaxOverrideHistory-1).Result()
	if err != nil {
		return nil, fmt.Errorf("store: redis override history: %w", err)
	}
	out := make([][]byte, len(all))
	for i, s := range all {
		out[i] = []byte(s)
	}
	return out, nil
}
