// Package memstore is the in-memory backend of store: the twin of the Redis
// scripts for one process and for tests, on an injected clock. The public
// store package builds it (store.NewMemory); the conformance suite in store
// checks it against redisstore.
package memstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
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
	units    map[string]*memUnit // the units' logs (units_memory.go), made on the first
	counters map[counterKey]*counterState
	// feedback holds what the upstream said, per key (feedback_memory.go).
	feedback map[string]*memFeedback
	lease    memLeaseState        // the in-flight caps (lease_memory.go)
	lanes    map[string]*memLanes // the priority lanes (lanes_memory.go), made on the first
	calls    int                  // Reserve calls since the last sweep of expired keys
	kept     int                  // keys left by the last sweep
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
	alg contract.Algorithm
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
func (m *Memory) Reserve(ctx context.Context, key string, req contract.Request) (res contract.Reservation, err error) {
	maxW, paced, ok := req.Valid(key)
	if !ok {
		return contract.Reservation{}, req.Invalid(key)
	}
	if err := ctx.Err(); err != nil {
		return contract.Reservation{}, err
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
	if req.Algorithm != contract.SlidingLog {
		ck := counterKey{req.Algorithm, key}
		st := m.counters[ck]
		if st == nil || st.expires <= now {
			st = &counterState{}
			m.counters[ck] = st
		}
		return reserveCounts(st, key, req, now, m.liveFeedback(key, now)), nil
	}
	if req.Lane != 0 || req.Yield {
		return m.reserveLanes(key, req, now, maxW, paced), nil // lanes_memory.go
	}
	m.repairFar(key, &req, now, maxW) // keystate.go
	c := logCall{m: m, req: req, key: key, now: now, maxW: maxW, windows: !paced || maxW > 0}
	c.reserve(&res, paced)
	return res, nil
}

// slot is a send time being found, and what set it: as log.lua's s, limit
// and cause, with the part of the request (Request.Also) whose limit it is.
type slot struct {
	at          int64
	part, limit int
	cause       contract.Cause
}

// raise moves the slot to t, set by a limit, when t is later.
func (s *slot) raise(t int64, part, limit int, cause contract.Cause) {
	if t > s.at {
		*s = slot{t, part, limit, cause}
	}
}

// live returns the entries not trimmed yet, oldest first.
func (lg *memLog) live() []int64 { return lg.times[lg.head:] }

// last returns the newest entry, 0 when the log is empty.
func (lg *memLog) last() int64 {
	if n := len(lg.times); n > lg.head {
		return lg.times[n-1]
	}
	return 0
}

// trim drops, as log.lua's trim, the entries at or before min(now, last) -
// maxW: outside every window a later call checks, even after a Cancel.
// Eagerly, where the script trims lazily: that changes memory, not answers.
func (lg *memLog) trim(now, maxW int64) {
	if n := len(lg.times); n > lg.head {
		horizon := min(now, lg.times[n-1]) - maxW
		for lg.head < n && lg.times[lg.head] <= horizon {
			lg.head++
		}
	}
}

// admits is the log's slot rule for one limit (prelude.lua's log_after): the
// earliest time a limit of n units per w µs admits cost more, the
// (n - cost + 1)-th newest entry (at least the newest) plus w; 0 when the
// log holds fewer entries.
func (lg *memLog) admits(n, w int64, cost int) int64 {
	live := lg.live()
	k := max(n-int64(cost)+1, 1)
	if k > int64(len(live)) {
		return 0
	}
	return live[int64(len(live))-k] + w
}

// slot raises s to what the window limits of limits (paced ones skipped)
// admit for cost units, naming the limit of part that set it.
func (lg *memLog) slot(s *slot, limits []contract.Limit, cost, part int) {
	for i := range limits {
		if l := &limits[i]; !l.Paced {
			s.raise(lg.admits(int64(l.N), contract.Micros(l.Per), cost), part, i, contract.CauseLimit)
		}
	}
}

// record appends cost entries at rec and keeps the log until rec has left
// a window of maxW, like the script's PEXPIRE: never shortened.
func (lg *memLog) record(rec int64, cost int, maxW int64) {
	for range cost {
		lg.times = append(lg.times, rec)
	}
	if lg.head > 32 && lg.head*2 > len(lg.times) {
		lg.times = append(lg.times[:0], lg.times[lg.head:]...)
		lg.head = 0
	}
	lg.expires = max(lg.expires, rec+maxW+1000)
}

// openLog returns key's log, trimmed at now against maxW, made when
// missing; for a request that keeps none (a paced limit alone, which
// neither reads nor writes the log, as in log.lua), the shared empty noLog,
// never written. m.mu is held.
func (m *Memory) openLog(key string, now, maxW int64, keep bool) *memLog {
	if !keep {
		return &noLog
	}
	lg := m.logs[key]
	if lg != nil && lg.expires <= now {
		delete(m.logs, key)
		lg = nil
	}
	if lg == nil {
		lg = &memLog{}
		m.logs[key] = lg
	}
	lg.trim(now, maxW)
	return lg
}

// logCall is one reservation of the log in the Memory store, with log.lua's
// locals as fields, so that each step of the script is a method; m.mu is
// held.
type logCall struct {
	m *Memory
	// req is a copy: a pointer to Reserve's would move it to the heap
	// (the key, beside it, is kept in the store's maps).
	req       contract.Request
	key       string
	now, maxW int64
	wide, xm  int64 // maxW with a learned margin, and that margin (feedback_memory.go)
	windows   bool  // the request has window limits: it keeps a log
	lg        *memLog
	s         slot
	// The paced state (pace.lua): the key's, ps, with its TAT
	// (0: none) and the pace reserved on it, of spacing t (0: none), burst,
	// keep and index in the request's limits.
	ps                       *memPace
	tat, t, burst, keep      int64
	pidx                     int
	held, budgetReset, moved int64     // see feedback
	also                     []memAlso // the other keys' logs (multikey.go)
	peek                     bool      // Usage: read the paced state, never make it
}

// reserve is log.lua: the slot, then the refusal or the record, into res.
func (c *logCall) reserve(res *contract.Reservation, paced bool) {
	req := &c.req
	f := c.m.liveFeedback(c.key, c.now)
	c.wide = c.maxW
	if f != nil {
		c.xm = f.margin(c.now)
		c.wide += c.xm // the log keeps the window a learned margin widens
		if _, w, ok := f.learned(c.now, c.maxW, int64(contract.MaxN(c.req.Limits))); ok {
			c.wide = max(c.wide, w) // and a learned limit's longer window
		}
	}
	c.lg = c.m.openLog(c.key, c.now, c.wide, c.windows)
	c.s = slot{at: c.now}
	if paced {
		c.ownPace()
	}
	c.lg.slot(&c.s, req.Limits, req.Cost, 0)
	res.Key, res.Cost = c.key, int32(req.Cost)
	if f != nil && !c.feedback(f, res) {
		return
	}
	c.slowStart()
	// Without an allowance, never before the last entry; with one, the
	// entry is kept in order when recorded instead.
	if last := c.lg.last(); req.Allowance == 0 && last > c.s.at {
		c.s = slot{last, 0, 0, contract.CauseOrder}
	}
	if req.Also != nil {
		c.also = c.m.alsoSlot(c.key, req, c.now, &c.s)
	}
	wait := c.s.at - c.now
	res.Cause, res.Part, res.Limit = c.s.cause, c.s.part, c.s.limit
	if wait > contract.MicrosDown(req.MaxWait) {
		res.RetryAfter = contract.FromMicros(wait)
		return
	}
	c.record(res)
	res.Allowed, res.Delay = true, contract.FromMicros(wait)
}

// ownPace reads the request's paced limit and its state, and raises the
// slot to what it allows (pace.lua).
func (c *logCall) ownPace() {
	for i := range c.req.Limits {
		if l := &c.req.Limits[i]; l.Paced {
			c.ps, c.tat = c.paceState()
			c.t, c.burst, c.keep, c.pidx = l.Interval(), int64(l.Burst), l.Keep(), i
			if c.keep > 0 && c.tat+c.keep <= c.now {
				c.tat = 0 // as pace.lua: a limit that starts slowly counts it as none
			}
			c.paceSlot(i, contract.CauseLimit)
		}
	}
}

// paceSlot raises the slot to the pace's theoretical arrival time, less its
// tolerance, plus the spacing of all but one unit (pace.lua), when it has a
// TAT.
func (c *logCall) paceSlot(limit int, cause contract.Cause) {
	if c.tat > 0 {
		c.s.raise(c.tat+(int64(c.req.Cost)-1-c.burst)*c.t, 0, limit, cause)
	}
}

// feedback is log.lua's reading of what the upstream said: a pause or an
// exhausted budget holds the slot back (or refuses it, into res, returning
// false), a learned limit counts like one more limit, and a learned pace is
// reserved on the key's paced state, the stricter of it and the request's.
func (c *logCall) feedback(f *memFeedback, res *contract.Reservation) bool {
	cost := int64(c.req.Cost)
	h := f.hold(c.now, cost, contract.MicrosDown(c.req.ServerWait()))
	if h.refuse {
		res.Cause, res.RetryAfter = contract.CauseUpstream, contract.FromMicros(h.until-c.now)
		return false
	}
	if h.until > c.now {
		c.held = h.until
		if h.until >= c.s.at { // the hold wins a tie
			c.s = slot{h.until, 0, 0, contract.CauseUpstream}
		}
	}
	c.budgetReset = h.budgetReset
	if c.xm > 0 { // a learned margin widens every window limit (log.lua)
		for i := range c.req.Limits {
			if l := &c.req.Limits[i]; !l.Paced {
				c.s.raise(c.lg.admits(int64(l.N), contract.Micros(l.Per)+c.xm, c.req.Cost), 0, i, contract.CauseLimit)
			}
		}
	}
	if n, w, ok := f.learned(c.now, c.maxW, int64(contract.MaxN(c.req.Limits))); ok {
		c.s.raise(c.lg.admits(n, w, c.req.Cost), 0, 0, contract.CauseLearned)
	}
	pt, pb, ok := f.pace(c.now)
	if ok {
		c.moved = f.pm
	}
	if ok && (c.t == 0 || pt > c.t || pb < c.burst) {
		pb = max(pb, cost-1) // a cost above it is one send
		if c.t == 0 {
			c.ps, c.tat = c.paceState()
			c.t, c.burst = pt, pb
		} else {
			c.t, c.burst = max(c.t, pt), min(c.burst, pb)
		}
		c.paceSlot(0, contract.CauseLearned)
	}
	return true
}

// slowStart is log.lua's: a pace that starts slowly has earned no burst with
// no TAT yet, nor at the end of a pause that holds it back.
func (c *logCall) slowStart() {
	if c.keep == 0 {
		return
	}
	from := c.held
	if c.tat == 0 {
		from = max(from, c.now)
	}
	if from > 0 && (c.tat == 0 || from+c.burst*c.t > c.tat) {
		c.tat = from + c.burst*c.t
		c.paceSlot(c.pidx, contract.CauseLimit)
	}
}

// record records the granted units: the budget, the entries at the latest
// time they may be sent in every log, the paced state (pace.lua); res gets
// what Cancel needs.
func (c *logCall) record(res *contract.Reservation) {
	req, s := &c.req, c.s.at
	if c.budgetReset > 0 && s < c.budgetReset {
		c.m.feedback[c.key].budget -= int64(req.Cost)
	}
	allowance := contract.Micros(req.Allowance)
	rec := max(s+allowance, c.lg.last())
	if c.also != nil {
		rec, res.AlsoKeys, res.Units = alsoRecord(c.also, req.Cost, rec), req.AlsoNames(), req.UnitsOf()
	}
	if c.t > 0 {
		// Recorded from the latest time the units may be sent (pace.lua).
		c.ps.tat = max(c.tat, s+allowance) + int64(req.Cost)*c.t
		c.ps.expires = c.ps.tat + c.keep + 1000
		res.TAT, res.Spacing, res.Moved = c.ps.tat, c.t, c.moved
	}
	if c.windows {
		c.lg.record(rec, req.Cost, c.wide)
	}
	res.Slot, res.Entry = s, rec
}

// Cancel implements Store.
func (m *Memory) Cancel(_ context.Context, res contract.Reservation) error {
	if !res.Allowed || res.Cost < 1 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if res.Alg != contract.SlidingLog {
		if st := m.counters[counterKey{res.Alg, res.Key}]; st != nil {
			cancelCounts(st, res)
		}
		return nil
	}
	if res.Yielded != "" && !m.cancelLanes(res) { // lanes_memory.go
		return nil
	}
	if ps := m.paces[res.Key]; res.TAT != 0 && ps != nil && ps.tat == res.TAT && ps.expires > m.micros() {
		// As cancel_pace.lua: only while no later reservation moved it.
		ps.tat -= int64(res.Cost) * res.Spacing
	}
	for _, u := range res.Units { // units_memory.go: settled to 0
		m.settleUnit(res.Key, u, res.UnitEntry(u), 0, m.micros())
	}
	for _, k := range res.AlsoKeys { // multikey.go
		if lg := m.logs[k]; lg != nil {
			cancelFrom(lg, res.Entry, int(res.Cost))
		}
	}
	if lg := m.logs[res.Key]; lg != nil {
		cancelFrom(lg, res.Entry, int(res.Cost))
	}
	return nil
}

// paceState is the key's paced state and its TAT (Memory.paceState), or for
// Usage, which changes nothing, only its TAT (a nil state).
func (c *logCall) paceState() (*memPace, int64) {
	if c.peek {
		if ps := c.m.paces[c.key]; ps != nil && ps.expires > c.now {
			return nil, ps.tat
		}
		return nil, 0
	}
	return c.m.paceState(c.key, c.now)
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
	for k, u := range m.units {
		if u.expires <= now {
			delete(m.units, k)
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
	for k, l := range m.lanes {
		if l.drop(now); len(l.idx) == 0 && len(l.bumped) == 0 && l.tensExpires <= now {
			delete(m.lanes, k)
		}
	}
	m.kept = len(m.logs) + len(m.counters) + len(m.paces)
}
