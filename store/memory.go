package store

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Memory is a Store in the memory of one process, with the semantics of Redis:
// the same slots and refusals (it trims old entries eagerly where the script
// trims a bounded number per call; that changes memory, not answers, except
// for a request with an Allowance on a clock that stepped back: see the trim
// in internal/script/log.lua). It is safe for concurrent use
// and starts no goroutine; expired keys are dropped lazily.
type Memory struct {
	now func() time.Time // nil: the monotonic clock, from start
	// start is when the store was made; without WithClock, now is
	// start's wall time plus the monotonic time since: one cheap clock
	// read per call (time.Since reads only the monotonic clock), and
	// immune to steps of the wall clock.
	start     time.Time
	startWall int64 // start.UnixMicro()

	mu       sync.Mutex
	logs     map[string]*memLog
	paces    map[string]*memPace // made on the first paced limit
	counters map[counterKey]*counterState
	// feedback holds what the upstream said, per key (feedback_memory.go).
	feedback map[string]*memFeedback
	lease    memLeaseState // the in-flight caps (lease_memory.go)
	calls    int           // Reserve calls since the last sweep of expired keys
	kept     int           // keys left by the last sweep
}

// micros reads the store's clock in microseconds; m.mu is held.
func (m *Memory) micros() int64 {
	if m.now != nil {
		return m.now().UnixMicro()
	}
	return m.startWall + int64(time.Since(m.start)/time.Microsecond)
}

// memLog is the log of one key: send times in microseconds, oldest first,
// live from head on.
type memLog struct {
	times   []int64
	head    int
	expires int64 // like PEXPIRE: the log is gone at or after this time
}

// noLog is the empty log of a request that keeps none.
var noLog memLog

// memPace is the state of a key's paced limit, as its pace key in Redis:
// the theoretical arrival time, which counts while now < expires.
type memPace struct {
	tat, expires int64
}

// counterKey names the state of a key under a counting algorithm: each
// algorithm keeps its own, as in Redis.
type counterKey struct {
	alg Algorithm
	key string
}

// sweepEvery is how many Reserve calls pass between sweeps of expired keys:
// the sweep costs one pass over the map, so its cost per call stays small
// while the map never holds more than one sweep's worth of dead keys.
const sweepEvery = 4096

// MemoryOption configures NewMemory.
type MemoryOption func(*Memory) error

// WithClock replaces the clock of a Memory store, e.g. for tests. Without it,
// the store reads the monotonic clock (the wall time at NewMemory plus the
// time elapsed since), so steps of the wall clock do not move its slots.
func WithClock(now func() time.Time) MemoryOption {
	return func(m *Memory) error {
		if now == nil {
			return errors.New("store: WithClock: nil clock")
		}
		m.now = now
		return nil
	}
}

// NewMemory returns an empty Memory store.
func NewMemory(opts ...MemoryOption) (*Memory, error) {
	start := time.Now()
	m := &Memory{start: start, startWall: start.UnixMicro(), logs: make(map[string]*memLog), counters: make(map[counterKey]*counterState)}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("store: NewMemory: nil option")
		}
		if err := o(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Reserve implements Store.
//
// The result is named and filled in place: Reserve returns a struct of
// several words by value, and copying it out costs as much as a map lookup.
func (m *Memory) Reserve(ctx context.Context, key string, req Request) (res Reservation, err error) {
	maxW, paced, ok := req.valid(key)
	if !ok {
		return Reservation{}, req.invalid(key)
	}
	if err := ctx.Err(); err != nil {
		return Reservation{}, err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	// Read under the lock, so that calls see the clock in order.
	now := m.micros()
	m.calls++
	// Sweeping costs a pass over the map: doing it once per max(sweepEvery,
	// keys kept last time) calls keeps its cost per call constant however
	// many keys there are, and the map within twice that plus the live keys.
	if m.calls >= max(sweepEvery, m.kept) {
		m.sweep(now)
	}
	if req.InFlight > 0 {
		l, refusal, ok := m.leaseBefore(key, &req, now)
		if !ok {
			return refusal, nil
		}
		defer m.leaseAfter(&res, l, now)
	}
	if req.Algorithm != SlidingLog {
		ck := counterKey{req.Algorithm, key}
		st := m.counters[ck]
		if st == nil || st.expires <= now {
			st = &counterState{}
			m.counters[ck] = st
		}
		return reserveCounts(st, key, req, now, m.liveFeedback(key, now)), nil
	}
	m.repairFar(key, &req, now, maxW) // keystate.go
	lg := m.logs[key]
	if lg != nil && lg.expires <= now {
		delete(m.logs, key)
		lg = nil
	}
	switch {
	case lg != nil:
	case paced && maxW == 0:
		lg = &noLog // a paced limit alone keeps no log (never written)
	default:
		lg = &memLog{}
		m.logs[key] = lg
	}
	// As in log.lua: entries at or before min(now, last) - maxW are
	// outside every window a later call checks, even after a Cancel.
	if n := len(lg.times); n > lg.head {
		horizon := min(now, lg.times[n-1]) - maxW
		for lg.head < n && lg.times[lg.head] <= horizon {
			lg.head++
		}
	}
	live := lg.times[lg.head:]

	s, limit, cause := now, 0, CauseNone
	// As log.lua and pace.lua: the paced limit's slot is its theoretical
	// arrival time, less its tolerance, plus the spacing of all but one unit.
	var pace, burst, tat, keep int64 // the paced limit's spacing (0: none), burst, state and keep (pace.lua)
	var ps *memPace
	pidx := 0
	if paced {
		ps, tat = m.paceState(key, now)
		for i, l := range req.Limits {
			if l.Paced {
				pace, burst, keep, pidx = l.interval(), int64(l.Burst), l.keep(), i
				if keep > 0 && tat+keep <= now {
					tat = 0 // as tat.lua: a limit that starts slowly counts it as none
				}
				if t := tat + (int64(req.Cost)-1-burst)*pace; tat > 0 && t > s {
					s, limit, cause = t, i, CauseLimit
				}
			}
		}
	}
	for i := range req.Limits {
		l := &req.Limits[i]
		if l.Paced {
			continue
		}
		if k := l.N - req.Cost + 1; k <= len(live) {
			if t := live[len(live)-k] + micros(l.Per); t > s {
				s, limit, cause = t, i, CauseLimit
			}
		}
	}
	res.key, res.cost = key, int32(req.Cost)
	var budgetReset, held, moved int64
	if f := m.liveFeedback(key, now); f != nil {
		h := f.hold(now, int64(req.Cost), microsDown(req.serverWait()))
		if h.refuse {
			res.Cause, res.RetryAfter = CauseUpstream, usDuration(h.until-now)
			return res, nil
		}
		// As log.lua: the hold first (it wins a tie), then the
		// learned limit, which counts like one more limit.
		if h.until > now {
			held = h.until
			if h.until >= s {
				s, limit, cause = h.until, 0, CauseUpstream
			}
		}
		budgetReset = h.budgetReset
		if n, w, ok := f.learned(now, maxW); ok {
			if k := max(n-int64(req.Cost)+1, 1); k <= int64(len(live)) {
				if t := live[int64(len(live))-k] + w; t > s {
					s, limit, cause = t, 0, CauseLearned
				}
			}
		}
		// As log.lua: a learned pace, on the key's paced state, the
		// stricter of it and the request's own.
		pt, pb, ok := f.pace(now)
		if ok {
			moved = f.pm
		}
		if ok && (pace == 0 || pt > pace || pb < burst) {
			pb = max(pb, int64(req.Cost)-1) // as log.lua: a cost above it is one send
			if pace == 0 {
				ps, tat = m.paceState(key, now)
				pace, burst = pt, pb
			} else {
				pace, burst = max(pace, pt), min(burst, pb)
			}
			if t := tat + (int64(req.Cost)-1-burst)*pace; tat > 0 && t > s {
				s, limit, cause = t, 0, CauseLearned
			}
		}
	}
	// As log.lua: a pace that starts slowly has earned no burst with no
	// TAT yet, nor at the end of a pause that holds it back.
	if keep > 0 {
		from := held
		if tat == 0 {
			from = max(from, now)
		}
		if from > 0 && (tat == 0 || from+burst*pace > tat) {
			tat = from + burst*pace
			if t := tat + (int64(req.Cost)-1-burst)*pace; t > s {
				s, limit, cause = t, pidx, CauseLimit
			}
		}
	}
	// As in log.lua: without an allowance, never before the last
	// entry; with one, the entry is kept in order below instead.
	allowance := micros(req.Allowance)
	if allowance == 0 && len(live) > 0 && live[len(live)-1] > s {
		s, limit, cause = live[len(live)-1], 0, CauseOrder
	}
	var also []memAlso // the other keys' logs (Request.Also; multikey.go)
	if req.Also != nil {
		also, s, res.Part, limit, cause = m.alsoSlot(&req, now, s, 0, limit, cause)
	}
	wait := s - now
	res.Cause, res.Limit = cause, limit
	if wait > microsDown(req.MaxWait) {
		res.RetryAfter = usDuration(wait)
		return res, nil
	}
	if budgetReset > 0 && s < budgetReset {
		m.feedback[key].budget -= int64(req.Cost)
	}
	rec := s + allowance
	if len(live) > 0 {
		rec = max(rec, live[len(live)-1])
	}
	if also != nil {
		rec, res.also = alsoRecord(also, req.Cost, rec), req.alsoNames()
	}
	if pace > 0 {
		// Recorded from the latest time the units may be sent (pace.lua).
		ps.tat = max(tat, s+allowance) + int64(req.Cost)*pace
		ps.expires = ps.tat + keep + 1000
		res.tat, res.spacing, res.moved = ps.tat, pace, moved
	}
	if !paced || maxW > 0 {
		for range req.Cost {
			lg.times = append(lg.times, rec)
		}
		if lg.head > 32 && lg.head*2 > len(lg.times) {
			lg.times = append(lg.times[:0], lg.times[lg.head:]...)
			lg.head = 0
		}
		// Like the script's PEXPIRE, never shortened.
		lg.expires = max(lg.expires, rec+maxW+1000)
	}
	res.Allowed, res.Delay, res.slot, res.entry = true, usDuration(wait), s, rec
	return res, nil
}

// Cancel implements Store.
func (m *Memory) Cancel(_ context.Context, res Reservation) error {
	if !res.Allowed || res.cost < 1 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if res.alg != SlidingLog {
		if st := m.counters[counterKey{res.alg, res.key}]; st != nil {
			cancelCounts(st, res)
		}
		return nil
	}
	if ps := m.paces[res.key]; res.tat != 0 && ps != nil && ps.tat == res.tat && ps.expires > m.micros() {
		// As cancel_pace.lua: only while no later reservation moved it.
		ps.tat -= int64(res.cost) * res.spacing
	}
	for _, k := range res.also { // multikey.go
		if lg := m.logs[k]; lg != nil {
			cancelFrom(lg, res.entry, int(res.cost))
		}
	}
	if lg := m.logs[res.key]; lg != nil {
		cancelFrom(lg, res.entry, int(res.cost))
	}
	return nil
}

// paceState returns key's paced state, made if missing, and its TAT if it
// still counts at now (else 0); m.mu is held.
func (m *Memory) paceState(key string, now int64) (*memPace, int64) {
	if m.paces == nil {
		m.paces = make(map[string]*memPace)
	}
	ps := m.paces[key]
	if ps == nil {
		ps = &memPace{}
		m.paces[key] = ps
	}
	if ps.expires > now {
		return ps, ps.tat
	}
	return ps, 0
}

// sweep drops every expired log; m.mu is held.
func (m *Memory) sweep(now int64) {
	m.calls = 0
	for k, ps := range m.paces {
		if ps.expires <= now {
			delete(m.paces, k)
		}
	}
	for k, lg := range m.logs {
		if lg.expires <= now {
			delete(m.logs, k)
		}
	}
	for k, f := range m.feedback {
		if f.expires() <= now {
			delete(m.feedback, k)
		}
	}
	for k, st := range m.counters {
		if st.expires <= now {
			delete(m.counters, k)
		}
	}
	m.kept = len(m.logs) + len(m.counters) + len(m.paces)
}
