package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/lua"
)

var (
	reserveScript  = redis.NewScript(lua.Reserve)
	cancelScript   = redis.NewScript(lua.Cancel)
	feedbackScript = redis.NewScript(lua.Feedback)
)

// DefaultPrefix starts the name of every Redis key the Redis store writes.
const DefaultPrefix = "throttle:"

// Redis is a Store in Redis, shared by every process that uses the same
// server or cluster: one script call per Reserve, waiting included. It is safe
// for concurrent use.
//
// Each rate key is one Redis LIST named prefix + "{" + key + "}": the braces
// make the key its own Cluster hash tag, so any auxiliary key of the same rate
// key lands in the same slot. Time is read inside the script with TIME, so the
// clocks of the clients do not matter; only durations travel back.
type Redis struct {
	client redis.Scripter
	prefix string
	clock  func() time.Time // nil: the server's TIME
}

// RedisOption configures NewRedis.
type RedisOption func(*Redis) error

// WithPrefix replaces DefaultPrefix, e.g. to give two applications sharing a
// Redis their own logs. It may not contain braces, which would move the
// Cluster hash tag.
func WithPrefix(prefix string) RedisOption {
	return func(r *Redis) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("store: WithPrefix(%q): braces would change the Cluster hash tag", prefix)
		}
		r.prefix = prefix
		return nil
	}
}

// WithClientTime makes the scripts use the given clock instead of the Redis
// server's TIME, for managed Redis that forbids TIME in scripts. Every client
// of a key must then have a synchronised clock: a client that is behind by d
// may send up to d early, and one that is ahead by d holds every other client
// of the key back by up to d (slots never go before the last entry).
func WithClientTime(now func() time.Time) RedisOption {
	return func(r *Redis) error {
		if now == nil {
			return errors.New("store: WithClientTime: nil clock")
		}
		r.clock = now
		return nil
	}
}

// NewRedis returns a Redis store on client, which may be a *redis.Client, a
// *redis.ClusterClient, a *redis.Ring, a Sentinel failover client or any
// redis.UniversalClient. It does no I/O.
func NewRedis(client redis.Scripter, opts ...RedisOption) (*Redis, error) {
	if client == nil {
		return nil, errors.New("store: NewRedis: nil client")
	}
	r := &Redis{client: client, prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("store: NewRedis: nil option")
		}
		if err := o(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// RedisKey is the name of the Redis key that holds the log of a rate key.
func (r *Redis) RedisKey(key string) string { return r.prefix + "{" + key + "}" }

// Reserve implements Store.
func (r *Redis) Reserve(ctx context.Context, key string, req Request) (Reservation, error) {
	if err := req.Validate(key); err != nil {
		return Reservation{}, err
	}
	args := make([]any, 0, 4+2*len(req.Limits))
	args = append(args, req.Cost, microsDown(req.MaxWait))
	if r.clock != nil {
		args = append(args, r.clock().UnixMicro())
	} else {
		args = append(args, "")
	}
	args = append(args, microsDown(req.serverWait()))
	for _, l := range req.Limits {
		args = append(args, l.N, micros(l.Per))
	}
	reply, err := reserveScript.Run(ctx, r.client, []string{r.RedisKey(key), r.FeedbackKey(key)}, args...).Slice()
	if err != nil {
		return Reservation{}, fmt.Errorf("store: redis reserve: %w", err)
	}
	v, err := int64s(reply)
	if err != nil {
		return Reservation{}, fmt.Errorf("store: redis reserve: %w", err)
	}
	if v[0] != 0 && v[0] != 1 || v[1] < 0 || v[0] == 1 && v[2] <= 0 ||
		v[3] < 0 || v[3] > int64(len(req.Limits)) || v[4] < 0 || v[4] > 2 {
		return Reservation{}, fmt.Errorf("store: redis reserve: unexpected reply %v", v)
	}
	res := Reservation{Limit: int(v[3]) - 1, Key: key, Cost: req.Cost, Upstream: v[4] == 1, Learned: v[4] == 2}
	wait := time.Duration(v[1]) * time.Microsecond
	if v[0] == 1 {
		res.Allowed, res.Delay, res.Slot = true, wait, v[2]
	} else {
		res.RetryAfter = wait
	}
	return res, nil
}

// Cancel implements Store.
func (r *Redis) Cancel(ctx context.Context, res Reservation) error {
	if !res.Allowed || res.Cost < 1 {
		return nil
	}
	err := cancelScript.Run(ctx, r.client, []string{r.RedisKey(res.Key)},
		strconv.FormatInt(res.Slot, 10), res.Cost).Err()
	if err != nil {
		return fmt.Errorf("store: redis cancel: %w", err)
	}
	return nil
}

// int64s checks that a script reply is a list of five integers.
func int64s(reply []any) (out [5]int64, err error) {
	if len(reply) != len(out) {
		return out, fmt.Errorf("unexpected reply of %d elements", len(reply))
	}
	for i, e := range reply {
		v, ok := e.(int64)
		if !ok {
			return out, fmt.Errorf("unexpected reply element %d of type %T", i, e)
		}
		out[i] = v
	}
	return out, nil
}

// FeedbackKey is the name of the Redis key, a HASH, that holds what the
// upstream said about a rate key (see Feedback): the log's name plus ":p",
// under the same hash tag, so one script call reads both in a Cluster.
func (r *Redis) FeedbackKey(key string) string { return r.RedisKey(key) + ":p" }

// Pause implements Feedback.
func (r *Redis) Pause(ctx context.Context, key string, d time.Duration) error {
	return r.Learn(ctx, key, Learned{Pause: d})
}

// Learn implements Feedback: one script call that merges l into the key's
// feedback hash.
func (r *Redis) Learn(ctx context.Context, key string, l Learned) error {
	if err := l.Validate(key); err != nil {
		return err
	}
	if l.empty() {
		return nil
	}
	now := ""
	if r.clock != nil {
		now = strconv.FormatInt(r.clock().UnixMicro(), 10)
	}
	// Validate ensures a limit comes with its window and TTL.
	err := feedbackScript.Run(ctx, r.client, []string{r.FeedbackKey(key)},
		now, micros(l.Pause), l.Limit.N, micros(l.Limit.Per), micros(l.LimitTTL),
		l.Remaining, micros(l.Reset), micros(ResetSlack)).Err()
	if err != nil {
		return fmt.Errorf("store: redis feedback: %w", err)
	}
	return nil
}
