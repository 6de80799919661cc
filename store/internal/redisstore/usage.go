package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/script"
)

// A paced limit (Limit.Paced) keeps no window but a pace time, and its
// LimitUsage says what that time holds at its own spacing Per/N: Used is the
// part of its burst spent, out of Burst+1 units that may go at once (Used =
// Burst+1: the next unit waits for the spacing), and Reserved the units
// reserved beyond that, still waiting for their slot. Units count from the
// latest time they may be sent (the Allowance). A limit that starts slowly
// (SlowStart) with no pace time has not earned its burst: Used = Burst.

// Usage implements Inspector: one read-only script call.
func (r *Redis) Usage(ctx context.Context, key string, req contract.Request) (contract.Usage, error) {
	req, err := contract.UsageRequest(key, req)
	if err != nil {
		return contract.Usage{}, err
	}
	// The max wait too: a pace time any caller may have left is plausible.
	args := make([]any, 0, 9+3*len(req.Limits))
	args = append(args, 1, contract.UsageServerWait)
	if r.clock != nil {
		args = append(args, r.clock().UnixMicro())
	} else {
		args = append(args, "")
	}
	args = append(args, contract.UsageServerWait, req.Algorithm.String())
	p := req.PacedLimit()
	if p >= 0 {
		l := req.Limits[p]
		args = append(args, l.Interval(), l.Burst, p+1, l.Keep())
	}
	for i, l := range req.Limits {
		switch {
		case i == p:
		case req.Algorithm == contract.Buckets:
			args = append(args, l.N, l.BucketLen(), l.Buckets())
		default:
			args = append(args, l.N, contract.Micros(l.Per))
		}
	}
	s, keys := usageScripts[req.Algorithm], []string{r.keyFor(key, req.Algorithm), r.feedbackKey(key)}
	if req.Algorithm == contract.SlidingLog {
		// The pace time: of the request's paced limit, or of a learned pace.
		keys = append(keys, r.paceKey(key))
	}
	if p >= 0 {
		s = usagePacedScript
	}
	reply, err := s.Run(ctx, r.client, keys, args...).Slice()
	if err != nil && badState(err) {
		// Usage changes nothing, so it does not repair: the next Reserve will.
		return contract.Usage{}, &KeyStateError{Key: key, Reason: "its state cannot be read", Err: err}
	}
	if err != nil {
		r.failed(err)
		return contract.Usage{}, fmt.Errorf("store: redis usage: %w", err)
	}
	v := make([]int64, len(reply))
	for i, e := range reply {
		x, ok := e.(int64)
		if !ok {
			return contract.Usage{}, fmt.Errorf("store: redis usage: unexpected reply element %d of type %T", i, e)
		}
		v[i] = x
	}
	if len(v) != usageHead+3*len(req.Limits) || v[1] < 0 || v[1] > int64(contract.CauseLearned) || v[2] < 0 || v[2] > int64(len(req.Limits)) {
		return contract.Usage{}, fmt.Errorf("store: redis usage: unexpected reply %v", v)
	}
	u := contract.Usage{
		Algorithm: req.Algorithm, Next: contract.FromMicros(v[0]), NextCause: contract.Cause(v[1]), Capped: v[3] == 1,
		Pause: contract.FromMicros(v[4]), LearnedFor: contract.FromMicros(v[7]), Budget: int(v[8]), BudgetReset: contract.FromMicros(v[9]),
		Entries: int(v[10]), Last: contract.FromMicros(v[11]),
	}
	if v[2] > 0 {
		u.NextLimit = int(v[2]) - 1
	}
	if v[5] > 0 {
		u.Learned = contract.Limit{N: int(v[5]), Per: contract.FromMicros(v[6])}
	}
	if v[12] > 0 {
		u.LearnedPace, u.LearnedPaceFor = contract.LearnedPace(v[12], v[13]), contract.FromMicros(v[14])
		u.LearnedPaceChanged = contract.FromMicros(v[15])
		if v[16] > 0 { // the time since the probe, plus one
			u.LearnedPaceProbed, u.PaceProbed = contract.FromMicros(v[16]-1), true
		}
	}
	if v[17] > 0 {
		u.LearnedMargin, u.LearnedMarginFor, u.LearnedMarginChanged = contract.FromMicros(v[17]), contract.FromMicros(v[18]), contract.FromMicros(v[19])
	}
	for i, l := range req.Limits {
		o := usageHead + 3*i
		u.Limits = append(u.Limits, contract.LimitUsage{Limit: l, Used: int(v[o]), Reserved: int(v[o+1]), Previous: int(v[o+2])})
	}
	return u, nil
}

// usageHead is the length of usage.lua's reply before its rows.
const usageHead = 20

// usagePacedScript is Usage of the log with a paced limit.
var usagePacedScript = newScript(script.Usage("paced"))

var usageScripts = map[contract.Algorithm]luaScript{
	contract.SlidingLog:     newScript(script.Usage(contract.SlidingLog.String())),
	contract.FixedWindow:    newScript(script.Usage(contract.FixedWindow.String())),
	contract.SlidingCounter: newScript(script.Usage(contract.SlidingCounter.String())),
	contract.Buckets:        newScript(script.Usage(contract.Buckets.String())),
}

// Scripts returns the source of every script the Redis store runs, by a
// short name ("reserve log", "cancel", "feedback", "usage log", …), for a
// check that a server loads them (SCRIPT LOAD).
func Scripts() map[string]string {
	out := map[string]string{"reserve paced": pacedScript.src, "cancel": cancelScript.src, "cancel paced": cancelPacedScript.src,
		"cancel counts": cancelCountsScript.src, "feedback": feedbackScript.src, "repair": repairScript.src}
	for a, s := range reserveScripts {
		out["reserve "+contract.Algorithm(a).String()] = s.src
	}
	for a, s := range usageScripts {
		out["usage "+a.String()] = s.src
	}
	out["usage paced"] = usagePacedScript.src
	for name, s := range alsoScripts { // multikey.go
		out[name] = s.src
	}
	leaseScripts(out) // lease.go
	return out
}

// Keys returns the names of every Redis key that may hold state of key:
// the log, the counters of each counting algorithm, the feedback hash, the
// pacing state (":pace"), and the leases and queue of a cap on requests in
// flight (":lease", ":lq"), for a tool that deletes a key's state. They
// share the key's hash tag, so one slot.
func (r *Redis) Keys(key string) []string {
	out := []string{r.logKey(key)}
	for a := contract.FixedWindow; a <= contract.Buckets; a++ {
		out = append(out, r.keyFor(key, a))
	}
	lk, qk, _ := r.leaseKeys(key)
	idx, bumped := r.laneKeys(key)
	return append(out, r.feedbackKey(key), r.paceKey(key), lk, qk, idx, bumped, r.tenantsKey(key))
}

// Delete removes all of key's state (every name Keys returns) in one DEL and
// returns how many Redis keys existed. It leaves the log's seen mark
// (write.lua): a sliding log deleted while it lived is taken as full by the
// next reservation, which waits out one window, since the upstream still
// counts what was sent. Use it to repair a key, not to lift a limit.
func (r *Redis) Delete(ctx context.Context, key string) (int64, error) {
	return r.del(ctx, key, r.Keys(key))
}

// DeleteFeedback removes what the upstream said about key (its pause,
// learned limit, pace or margin, budget: the feedback hash) and returns how many
// Redis keys existed (0 or 1). The sends stay counted.
func (r *Redis) DeleteFeedback(ctx context.Context, key string) (int64, error) {
	return r.del(ctx, key, []string{r.feedbackKey(key)})
}

// del is one DEL of names, the Redis keys of key.
func (r *Redis) del(ctx context.Context, key string, names []string) (int64, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", contract.ErrInvalidRequest)
	}
	c, ok := r.client.(redis.Cmdable)
	if !ok {
		return 0, fmt.Errorf("store: redis delete: the client (%T) cannot run DEL", r.client)
	}
	n, err := c.Del(ctx, names...).Result()
	if err != nil {
		return 0, fmt.Errorf("store: redis delete: %w", err)
	}
	return n, nil
}
