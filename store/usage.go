package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/store/internal/script"
)

// Usage is what a key's state says at one moment: how much of each limit is
// used, when the next request could go, and what the upstream said. The
// Redis store reads it in one read-only script call, the Memory store under
// its lock; both give the same answers, but for Entries.
type Usage struct {
	// Algorithm is the one the key was inspected under.
	Algorithm Algorithm
	// Limits has one entry per limit of the request, in its order.
	Limits []LimitUsage
	// Next is how long from now until the earliest slot the limits and the
	// upstream's feedback allow a request of cost 1 (0: now). Nothing is
	// reserved. The order of the log (a reservation without an allowance
	// never goes before the newest entry, see Last) is left out: Reserved
	// counts the reservations still waiting.
	Next time.Duration
	// NextCause is what set Next: CauseNone (free now), CauseLimit
	// (Limits[NextLimit]), CauseUpstream or CauseLearned.
	NextCause Cause
	NextLimit int
	// Capped is set when the counting search ran out of steps: Next is then
	// only a lower bound.
	Capped bool
	// Entries is the number of entries in the log, those not trimmed yet
	// included (SlidingLog; 0 for the counting algorithms). The Memory store
	// trims eagerly and the script lazily, so the two may differ here, as
	// in memory, never in the answers above.
	Entries int
	// Last is the time of the log's newest entry minus now: positive while
	// a reservation still waits (SlidingLog, when Entries > 0).
	Last time.Duration
	// Pause is how long the upstream's pause still lasts (0: none).
	Pause time.Duration
	// Learned is a limit learned from the upstream's headers, still valid
	// for LearnedFor (N 0: none).
	Learned    Limit
	LearnedFor time.Duration
	// LearnedPace is the pace the key moved to after a 429 despite
	// compliance, still valid for LearnedPaceFor (N 0: none): 1 unit per
	// Per, Burst more at once. SlidingLog reservations keep it beside a
	// paced limit of their own, the stricter of the two.
	LearnedPace    Limit
	LearnedPaceFor time.Duration
	// Budget units are left until BudgetReset from now (BudgetReset 0: no
	// budget).
	Budget      int
	BudgetReset time.Duration
}

// LimitUsage is the state of one limit of a key.
type LimitUsage struct {
	Limit Limit
	// Used is, for SlidingLog, the units recorded in (now - Per, now]; for
	// FixedWindow and SlidingCounter, the units of the window holding now;
	// for Buckets, of the ceil(Per/Precision) buckets ending with now's.
	Used int
	// Reserved is the units recorded after now (SlidingLog) or counted in
	// later windows or buckets: reservations still waiting for their slot.
	Reserved int
	// Previous is, for SlidingCounter, the units of the window before
	// now's, which its estimate weighs in (0 for the others).
	Previous int
}

// A paced limit (Limit.Paced) keeps no window but a pace time, and its
// LimitUsage says what that time holds at its own spacing Per/N: Used is the
// part of its burst spent, out of Burst+1 units that may go at once (Used =
// Burst+1: the next unit waits for the spacing), and Reserved the units
// reserved beyond that, still waiting for their slot. Units count from the
// latest time they may be sent (the Allowance). A limit that starts slowly
// (SlowStart) with no pace time has not earned its burst: Used = Burst.

// Inspector is implemented by stores that can report a key's usage without
// changing it: Redis and Memory.
type Inspector interface {
	// Usage reports the state of key under req's Limits and Algorithm (the
	// same as its reservations use). The other fields of req are ignored.
	// It changes nothing: no trim, no TTL, no counter.
	Usage(ctx context.Context, key string, req Request) (Usage, error)
}

var (
	_ Inspector = (*Redis)(nil)
	_ Inspector = (*Memory)(nil)
)

// usageRequest is req as Usage reads it: cost 1, no allowance, and a wait
// beyond any pause (usageServerWait), so that nothing refuses.
func usageRequest(key string, req Request) (Request, error) {
	u := Request{Limits: req.Limits, Cost: 1, Algorithm: req.Algorithm, MaxWait: time.Duration(usageServerWait) * time.Microsecond}
	return u, u.Validate(key)
}

// usageServerWait stands for "any pause": hold never refuses within it.
const usageServerWait = int64(4 * MaxFeedback / time.Microsecond)

// paceUsage is the LimitUsage of a paced limit l whose key holds the pace
// time tat at now (0: none); see LimitUsage.
func paceUsage(l Limit, tat, now int64) LimitUsage {
	t, b := l.interval(), int64(l.Burst)
	k := int64(0)
	switch {
	case tat > now:
		k = (tat - now + t - 1) / t
	case tat == 0 && l.SlowStart:
		k = b
	}
	used := min(k, b+1)
	return LimitUsage{Limit: l, Used: int(used), Reserved: int(k - used)}
}

// Usage implements Inspector: one read-only script call.
func (r *Redis) Usage(ctx context.Context, key string, req Request) (Usage, error) {
	req, err := usageRequest(key, req)
	if err != nil {
		return Usage{}, err
	}
	// The max wait too: a pace time any caller may have left is plausible.
	args := make([]any, 0, 9+3*len(req.Limits))
	args = append(args, 1, usageServerWait)
	if r.clock != nil {
		args = append(args, r.clock().UnixMicro())
	} else {
		args = append(args, "")
	}
	args = append(args, usageServerWait, req.Algorithm.String())
	p := req.paced()
	if p >= 0 {
		l := req.Limits[p]
		args = append(args, l.interval(), l.Burst, p+1, l.keep())
	}
	for i, l := range req.Limits {
		switch {
		case i == p:
		case req.Algorithm == Buckets:
			args = append(args, l.N, l.precision(), l.buckets())
		default:
			args = append(args, l.N, micros(l.Per))
		}
	}
	s, keys := usageScripts[req.Algorithm], []string{r.keyFor(key, req.Algorithm), r.feedbackKey(key)}
	if req.Algorithm == SlidingLog {
		// The pace time: of the request's paced limit, or of a learned pace.
		keys = append(keys, r.paceKey(key))
	}
	if p >= 0 {
		s = usagePacedScript
	}
	reply, err := s.Run(ctx, r.client, keys, args...).Slice()
	if err != nil && badState(err) {
		// Usage changes nothing, so it does not repair: the next Reserve will.
		return Usage{}, &KeyStateError{Key: key, Reason: "its state cannot be read", Err: err}
	}
	if err != nil {
		r.failed(err)
		return Usage{}, fmt.Errorf("store: redis usage: %w", err)
	}
	v := make([]int64, len(reply))
	for i, e := range reply {
		x, ok := e.(int64)
		if !ok {
			return Usage{}, fmt.Errorf("store: redis usage: unexpected reply element %d of type %T", i, e)
		}
		v[i] = x
	}
	if len(v) != usageHead+3*len(req.Limits) || v[1] < 0 || v[1] > int64(CauseLearned) || v[2] < 0 || v[2] > int64(len(req.Limits)) {
		return Usage{}, fmt.Errorf("store: redis usage: unexpected reply %v", v)
	}
	u := Usage{
		Algorithm: req.Algorithm, Next: usDuration(v[0]), NextCause: Cause(v[1]), Capped: v[3] == 1,
		Pause: usDuration(v[4]), LearnedFor: usDuration(v[7]), Budget: int(v[8]), BudgetReset: usDuration(v[9]),
		Entries: int(v[10]), Last: usDuration(v[11]),
	}
	if v[2] > 0 {
		u.NextLimit = int(v[2]) - 1
	}
	if v[5] > 0 {
		u.Learned = Limit{N: int(v[5]), Per: usDuration(v[6])}
	}
	if v[12] > 0 {
		u.LearnedPace, u.LearnedPaceFor = learnedPace(v[12], v[13]), usDuration(v[14])
	}
	for i, l := range req.Limits {
		o := usageHead + 3*i
		u.Limits = append(u.Limits, LimitUsage{Limit: l, Used: int(v[o]), Reserved: int(v[o+1]), Previous: int(v[o+2])})
	}
	return u, nil
}

// usageHead is the length of usage.lua's reply before its rows.
const usageHead = 15

// learnedPace is a learned pace of spacing t µs and burst b as a Limit.
func learnedPace(t, b int64) Limit {
	return Limit{N: 1, Per: usDuration(t), Paced: true, Burst: int(b)}
}

// usagePacedScript is Usage of the log with a paced limit.
var usagePacedScript = newScript(script.Usage("paced"))

var usageScripts = map[Algorithm]luaScript{
	SlidingLog:     newScript(script.Usage(SlidingLog.String())),
	FixedWindow:    newScript(script.Usage(FixedWindow.String())),
	SlidingCounter: newScript(script.Usage(SlidingCounter.String())),
	Buckets:        newScript(script.Usage(Buckets.String())),
}

// Scripts returns the source of every script the Redis store runs, by a
// short name ("reserve log", "cancel", "feedback", "usage log", …), for a
// check that a server loads them (SCRIPT LOAD).
func Scripts() map[string]string {
	out := map[string]string{"reserve paced": pacedScript.src, "cancel": cancelScript.src, "cancel paced": cancelPacedScript.src,
		"cancel counts": cancelCountsScript.src, "feedback": feedbackScript.src, "repair": repairScript.src}
	for a, s := range reserveScripts {
		out["reserve "+Algorithm(a).String()] = s.src
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
	for a := FixedWindow; int(a) < len(algorithmNames); a++ {
		out = append(out, r.keyFor(key, a))
	}
	lk, qk, _ := r.leaseKeys(key)
	return append(out, r.feedbackKey(key), r.paceKey(key), lk, qk)
}

// Delete removes all of key's state (every name Keys returns) in one DEL and
// returns how many Redis keys existed. Every process then starts the key
// afresh: use it to repair a key, not to lift a limit the upstream counts.
func (r *Redis) Delete(ctx context.Context, key string) (int64, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", ErrInvalidRequest)
	}
	c, ok := r.client.(redis.Cmdable)
	if !ok {
		return 0, fmt.Errorf("store: redis delete: the client (%T) cannot run DEL", r.client)
	}
	n, err := c.Del(ctx, r.Keys(key)...).Result()
	if err != nil {
		return 0, fmt.Errorf("store: redis delete: %w", err)
	}
	return n, nil
}

// logUsage is Usage of the log, as usage.lua: Reserve's slot (logCall),
// for a cost of 1, without the order of the log and without recording,
// trimming or making any state; m.mu is held.
func (m *Memory) logUsage(u *Usage, key string, req Request, now, maxW int64, paced bool, f *memFeedback) {
	c := logCall{m: m, req: req, key: key, now: now, maxW: maxW, windows: !paced || maxW > 0, peek: true}
	c.lg = &noLog
	if l := m.logs[key]; c.windows && l != nil && l.expires > now {
		c.lg = l
	}
	c.s = slot{at: now}
	if paced {
		c.ownPace()
	}
	live := c.lg.live()
	after := func(t int64) int {
		return len(live) - sort.Search(len(live), func(i int) bool { return live[i] > t })
	}
	future := after(now)
	for _, l := range req.Limits {
		if l.Paced {
			u.Limits = append(u.Limits, paceUsage(l, c.tat, now))
		} else {
			u.Limits = append(u.Limits, LimitUsage{Limit: l, Used: after(now-micros(l.Per)) - future, Reserved: future})
		}
	}
	u.Entries = len(live)
	if len(live) > 0 {
		u.Last = usDuration(c.lg.last() - now)
	}
	c.lg.slot(&c.s, req.Limits, 1, 0)
	if f != nil {
		c.feedback(f, &Reservation{}) // never refuses: the wait is beyond any pause
	}
	c.slowStart()
	u.Next, u.NextCause, u.NextLimit = usDuration(c.s.at-now), c.s.cause, c.s.limit
}

// Usage implements Inspector, with the rules of usage.lua. It changes
// nothing, not even an expired key (which reads as empty).
func (m *Memory) Usage(ctx context.Context, key string, req Request) (Usage, error) {
	req, err := usageRequest(key, req)
	if err != nil {
		return Usage{}, err
	}
	if err := ctx.Err(); err != nil {
		return Usage{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.micros()
	u := Usage{Algorithm: req.Algorithm}
	var f *memFeedback
	if g := m.feedback[key]; g != nil && g.expires() > now {
		f = g
		if f.pause > now {
			u.Pause = usDuration(f.pause - now)
		}
		if f.until > now {
			u.Learned, u.LearnedFor = Limit{N: int(f.n), Per: usDuration(f.w)}, usDuration(f.until-now)
		}
		if f.reset > now {
			u.Budget, u.BudgetReset = int(f.budget), usDuration(f.reset-now)
		}
		if f.pe > now {
			u.LearnedPace, u.LearnedPaceFor = learnedPace(f.pt, f.pb), usDuration(f.pe-now)
		}
	}
	maxW, paced := int64(0), false
	for _, l := range req.Limits {
		if l.Paced {
			paced = true
		} else {
			maxW = max(maxW, window(req.Algorithm, l))
		}
	}
	if req.Algorithm == SlidingLog {
		m.logUsage(&u, key, req, now, maxW, paced, f)
	} else {
		m.countsUsage(&u, key, req, now, maxW, f)
	}
	return u, nil
}

// countsUsage is Usage of a counting algorithm: reserveCounts' search, on a
// copy of the limits, recording nothing; m.mu is held.
func (m *Memory) countsUsage(u *Usage, key string, req Request, now, maxW int64, f *memFeedback) {
	limits := append([]Limit(nil), req.Limits...)
	start, cause := now, CauseNone
	var tightened []bool
	if f != nil {
		h := f.hold(now, 1, usageServerWait)
		if h.until > now {
			start, cause = h.until, CauseUpstream
		}
		if ln, lw, ok := f.learned(now, maxW); ok {
			tightened = make([]bool, len(limits))
			for i, l := range limits {
				n := max(int(float64(ln)*float64(window(req.Algorithm, l))/float64(lw)), 1)
				if n < l.N {
					limits[i].N, tightened[i] = n, true
				}
			}
		}
	}
	c := make([]counts, len(limits))
	if st := m.counters[counterKey{req.Algorithm, key}]; st != nil && st.expires > now {
		for i := range c {
			if i < len(st.c) {
				c[i] = st.c[i]
			}
		}
	}
	for i := range c {
		if c[i] == nil {
			c[i] = counts{}
		}
	}
	// earliest only reads c: a missing index reads as 0 and adds nothing.
	t, limit, capped := earliest(req.Algorithm, limits, c, start, 1)
	switch {
	case limit >= 0 && tightened != nil && tightened[limit]:
		cause = CauseLearned
	case limit >= 0:
		u.NextLimit, cause = limit, CauseLimit
	}
	u.Next, u.NextCause, u.Capped = usDuration(t-now), cause, capped
	for i, l := range req.Limits {
		k := floorDiv(now, span(req.Algorithm, l))
		b := int64(1)
		if req.Algorithm == Buckets {
			b = l.buckets()
		}
		lu := LimitUsage{Limit: l}
		for j, v := range c[i] {
			switch {
			case j > k:
				lu.Reserved += int(v)
			case j > k-b:
				lu.Used += int(v)
			}
		}
		if req.Algorithm == SlidingCounter {
			lu.Previous = int(c[i][k-1])
		}
		u.Limits = append(u.Limits, lu)
	}
}
