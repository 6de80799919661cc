package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
)

// ErrKeyState is matched, with errors.Is, by a *KeyStateError: the state of
// one rate key could not be read.
var ErrKeyState = errors.New("store: rate key in a wrong state")

// KeyStateError says that the Redis keys of one rate key held something the
// store's scripts cannot read: a value of another type (another program
// wrote to a name under the store's prefix: WRONGTYPE), an entry that is not
// a number, or a time implausibly far in the future (see the log script's
// header). It is an error of that key's request only: the store itself
// answered, and every other key is unaffected. The throttle Transport
// returns it to the caller of that request and does not mark the store down.
//
// The Redis store repairs such a key when it meets one (it removes what its
// scripts cannot read: everything under its prefix is its own) and retries
// the call once, so a caller sees this error only when the repair or the
// retry failed too. The Memory store never returns it: nothing outside the
// process can write its state, and it repairs a time past the horizon (after
// its clock stepped back, say) as the Redis store does.
type KeyStateError struct {
	Key    string // the rate key
	Reason string // what was wrong, and what the repair did
	Err    error  // the server's reply (joined with the repair's error, if any)
}

func (e *KeyStateError) Error() string {
	return fmt.Sprintf("store: rate key %q in a wrong state: %s: %v", e.Key, e.Reason, e.Err)
}

// Is makes errors.Is(err, ErrKeyState) true.
func (e *KeyStateError) Is(target error) bool { return target == ErrKeyState }

// Unwrap returns the server's reply.
func (e *KeyStateError) Unwrap() error { return e.Err }

// badState reports whether err is a reply that says a script met a key in a
// wrong state: WRONGTYPE, the log's KEYSTATE, or HINCRBY on a field that is
// not an integer.
func badState(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	return redis.HasErrorPrefix(err, "WRONGTYPE") || redis.HasErrorPrefix(err, "KEYSTATE") ||
		strings.Contains(err.Error(), "hash value is not an integer")
}

// repair runs the repair script on the Redis keys of key under alg (and its
// pace key when paced), and logs what it did.
func (r *Redis) repair(ctx context.Context, key string, alg contract.Algorithm, paced bool, horizon int64) error {
	state := r.keyFor(key, alg)
	keys := []string{state, r.feedbackKey(key)}
	if paced {
		keys = append(keys, r.paceKey(key))
	}
	kind := "hash"
	if alg == contract.SlidingLog {
		kind = "list"
	}
	now := ""
	if r.clock != nil {
		now = fmt.Sprint(r.clock().UnixMicro())
	}
	done, err := repairScript.Run(ctx, r.client, keys, kind, now, horizon, contract.Micros(contract.MaxFeedback)).Int64Slice()
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	if r.logger != nil {
		r.logger.WarnContext(ctx, "throttle: repaired a rate key in a wrong state",
			"key", key, "redis_key", state, "state", repairSays(done, 0), "feedback", repairSays(done, 1), "pace", repairSays(done, 2))
	}
	return nil
}

// repairSays renders element i of the repair script's reply.
func repairSays(done []int64, i int) string {
	switch {
	case i >= len(done):
		return "not read"
	case done[i] < 0:
		return "deleted (another type)"
	default:
		return fmt.Sprintf("%d entries removed", done[i])
	}
}

// keyStateError repairs key after err, a bad-state reply, and runs again
// once, with retry. It returns the retry's answer, or a *KeyStateError when
// the repair fails or the retry meets a wrong state again.
func (r *Redis) healed(ctx context.Context, key string, alg contract.Algorithm, paced bool, horizon int64, err error, retry func() ([]any, error)) ([]any, error) {
	if rerr := r.repair(ctx, key, alg, paced, horizon); rerr != nil {
		return nil, &KeyStateError{Key: key, Reason: "the repair failed", Err: errors.Join(err, rerr)}
	}
	reply, err2 := retry()
	if err2 != nil && badState(err2) {
		return nil, &KeyStateError{Key: key, Reason: "still wrong after a repair", Err: err2}
	}
	return reply, err2
}
