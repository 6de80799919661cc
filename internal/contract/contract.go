// Package contract is the protocol between throttle and its stores: the
// Request a reservation asks, the Reservation a store answers, what the
// upstream said (Learned), the leases of a cap on requests in flight, the
// usage of a key, and the Store interface every backend implements.
//
// It is internal: no one outside the module can implement a Store, because
// the engine relies on every store deciding a reservation, its feedback and
// its leases in one atomic step on one clock, which the two backends
// (store/internal/redisstore, store/internal/memstore) keep and one
// conformance suite (store) checks. Users pick a backend through the public
// store package.
package contract

// The files: contract.go is the request, the reservation and the Store;
// algorithm.go the counting algorithms; feedback.go what the upstream said;
// lease.go the cap on requests in flight; multikey.go more keys in one
// request; usage.go a key's state; horizon.go how far ahead a time may lie.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Limit allows at most N units in any interval of length Per; or, when
// Paced, one unit every Per/N with Burst units of tolerance (see Paced).
type Limit struct {
	N   int
	Per time.Duration
	// Precision is the bucket length of the Buckets algorithm (zero: Per);
	// the other algorithms refuse a Precision.
	Precision time.Duration
	// Paced makes the limit a GCRA (virtual scheduling) instead of a
	// window: units are spaced Per/N apart, and up to Burst more may go
	// early, after an idle spell (Burst 0: evenly spaced). Its state is one
	// time per key, beside the log. Only SlidingLog takes a paced limit, at
	// most one per request, with Cost <= Burst+1 and Burst <= N. Cancel
	// gives its time back only while no later reservation has been made on
	// it (docs/pacing.md).
	Paced bool
	// Burst is the paced limit's tolerance in units (Paced only).
	Burst int
	// SlowStart makes a paced limit earn its burst instead of starting
	// with it (Paced only): a key with no state yet (new, or idle for Per
	// past its last slot), and the requests a pause or an exhausted budget
	// held back, are sent evenly spaced from their first; the burst then
	// builds up while the key sends slower than its pace. For an upstream
	// whose tolerance is not known: a burst it refuses is never the first
	// thing it sees.
	SlowStart bool
	// Unit names what the limit counts when it is not the request's Cost
	// (throttle's Limit.Of): the engine moves such a limit into a unit
	// part (Part.Unit); a store ignores the field.
	Unit string
}

// String renders the limit as "5000/1h0m0s", "5000/1h0m0s/1m0s" with a
// Precision, or "100/1s paced", "100/1s paced+10" when paced with a burst
// ("100/1s paced+10 slow start" with SlowStart).
func (l Limit) String() string {
	if l.Unit != "" {
		u := l
		u.Unit = ""
		return u.String() + " " + l.Unit
	}
	switch {
	case l.Paced && l.SlowStart:
		return fmt.Sprintf("%d/%s paced+%d slow start", l.N, l.Per, l.Burst)
	case l.Precision != 0:
		return fmt.Sprintf("%d/%s/%s", l.N, l.Per, l.Precision)
	case l.Paced && l.Burst != 0:
		return fmt.Sprintf("%d/%s paced+%d", l.N, l.Per, l.Burst)
	case l.Paced:
		return fmt.Sprintf("%d/%s paced", l.N, l.Per)
	}
	return fmt.Sprintf("%d/%s", l.N, l.Per)
}

// Interval is the spacing of a paced limit in microseconds, Per/N rounded
// up (never shorter than asked).
func (l Limit) Interval() int64 {
	w, n := Micros(l.Per), int64(l.N)
	return (w + n - 1) / n
}

// Keep is how long a paced limit's state outlives its TAT, in microseconds:
// its window for one that starts slowly (its earned burst stays for a window
// of idleness), 0 otherwise (pace.lua).
func (l Limit) Keep() int64 {
	if l.SlowStart {
		return Micros(l.Per)
	}
	return 0
}

// PaceInterval is the spacing of a learned pace in microseconds, 0 for none.
func PaceInterval(l Limit) int64 {
	if l.N <= 0 {
		return 0
	}
	return l.Interval()
}

// PacedLimit returns the index of r's PacedLimit limit, -1 if it has none.
func (r *Request) PacedLimit() int {
	for i := range r.Limits {
		if r.Limits[i].Paced {
			return i
		}
	}
	return -1
}

// Request is what a caller asks of Reserve.
type Request struct {
	// Limits must all admit the request. They are checked together, in one
	// atomic step, against the same log.
	Limits []Limit
	// Cost is the number of units the request takes, 1 <= Cost <= every N.
	Cost int
	// MaxWait is the longest delay the caller accepts. A slot further away is
	// refused and nothing is recorded. Zero asks for an immediate slot.
	MaxWait time.Duration
	// MaxServerWait, if positive, bounds the delay that an upstream pause or
	// an exhausted budget (see Feedback) imposes, when it is below MaxWait:
	// a pause ending further away is refused at once, with Reservation.Cause
	// CauseUpstream. Zero: MaxWait alone.
	MaxServerWait time.Duration
	// Algorithm is how the units are counted; the zero value is SlidingLog.
	Algorithm Algorithm
	// Allowance is how late after its slot the caller may send
	// (SlidingLog only; the counting algorithms refuse one; at most
	// MaxAllowance). The units are recorded at slot + Allowance, or at the
	// log's last entry if that is later (the log stays ordered), so that
	// later reservations count them at the latest time they may be sent:
	// no window then holds more than N, however late within its allowance
	// each caller sends. An allowance costs rate to the reservations one
	// window later, and, through the order, to those recorded soon after
	// it: a caller much slower than the others holds back their entries
	// too. Zero: the units are recorded at the slot, which is then never
	// before the log's last entry (FIFO across callers).
	Allowance time.Duration
	// Also names more rate keys, each with its own limits, that must admit
	// the request too (SlidingLog only): the slot is the earliest that
	// every key allows, and the units are recorded under every key or
	// under none (multikey.go). Nil: the key alone.
	Also []Part

	// A cap on the requests in flight (lease.go, docs/concurrency.md).

	// InFlight, if positive, caps the key's requests in flight: a granted
	// reservation also holds one of InFlight leases (Reservation.Lease),
	// taken in the same call, until Leases.Release. When none is free,
	// nothing is recorded: the reservation is refused with CauseInFlight
	// and, if MaxWait is positive, its Lease is a ticket in the key's queue
	// (Leases.Await). Zero: no cap. With Also, the cap is on key alone.
	InFlight int
	// LeaseFor is how long a lease lasts unless renewed (Leases.Renew): a
	// holder that dies gives its lease back after it. Required with
	// InFlight, at most MaxLease.
	LeaseFor time.Duration
	// Held is a lease the request holds already (handed by Leases.Await):
	// the reservation takes no other, and leaves it held when refused.
	Held Lease

	// Priority lanes (lanes.go, docs/lanes.md).

	// Lane is the request's priority, 0 (the default) to MaxLane: the slot
	// is the earlier of its own and the earliest slot, more than LaneGuard
	// ahead, that a waiter of a lower lane holds with Yield, which it takes
	// (Reservation.Took).
	Lane int
	// Yield records the reservation as one a higher lane may take: the
	// caller must then confirm it at its slot (Confirm) before sending.
	Yield bool
	// Confirm is the Yielded member of the reservation the caller holds:
	// the store confirms it (Reservation.Confirmed, nothing recorded) or,
	// when a higher lane took its slot, reserves the next slot of the
	// caller's lane, or a lower one's, as for a new request of the same
	// lane.
	Confirm string

	// Fair shares between tenants (tenants.go, docs/tenants.md).

	// Tenant names the request's tenant (hashed: it is stored): its
	// reservation yields (Yield must be set) and is ordered among the
	// key's waiters by its start tag (Reservation.Tag) rather than by a
	// lane. Empty: no tenant.
	Tenant string
	// Step is how far the tenant's finish tag moves (TenantStep: its cost
	// over its weight), 1 to 2^32; required with Tenant.
	Step int64
	// Again, with Tenant, reserves once more for a reservation of the
	// tenant given back (a retake: its waiter was late): with its start
	// tag, Tag, so that it keeps its place among the key's waiters, and
	// without moving the tenant's finish tag (it was charged once).
	Again bool
	Tag   int64
}

// A key should always be reserved with the same limits: a log is trimmed
// against the longest window of the call at hand, so a call with shorter
// windows may drop entries that a longer window on the same key still needs.
// The throttle Transport keys its logs by rule for this reason.

// ErrInvalidRequest is returned, wrapped, for a Request that no store could
// ever grant: no limits, a limit or cost below 1, a cost above a limit or
// above 2^31-1, a negative MaxWait, an empty key, an unknown Algorithm, a
// Precision the Algorithm cannot use, or a paced limit it cannot (see
// Limit.Paced).
var ErrInvalidRequest = errors.New("store: invalid request")

// Validate reports whether r is well formed; every store calls it first.
func (r Request) Validate(key string) error {
	if _, _, ok := r.Valid(key); ok {
		return nil
	}
	return r.Invalid(key)
}

// Valid reports, cheaply and without allocating, whether Validate accepts r,
// the longest window of its window (not paced) limits in microseconds, and
// whether one of its limits is paced (the one pass over them serves all
// three: the Memory store's hot path calls it). invalid says which rule
// failed; a test keeps the two in step.
func (r *Request) Valid(key string) (maxPer int64, paced, ok bool) {
	ok = key != "" && len(r.Limits) > 0 && r.Cost >= 1 && r.Cost <= math.MaxInt32 && r.MaxWait >= 0 && r.MaxServerWait >= 0 &&
		(r.Allowance == 0 || r.Allowance > 0 && r.Allowance <= MaxAllowance && r.Algorithm == SlidingLog) &&
		int(r.Algorithm) < len(algorithmNames) && r.leaseValid() && (!r.laned() || r.laneValid())
	for i := range r.Limits {
		l := &r.Limits[i] // no copy: this is the Memory store's hot path
		ok = ok && l.N >= 1 && l.Per >= time.Microsecond && r.Cost <= l.N &&
			(l.Precision == 0 || r.Algorithm == Buckets && l.Precision >= time.Microsecond && l.Precision <= l.Per) &&
			(r.Algorithm != Buckets || l.Buckets() <= MaxBuckets)
		if l.Paced {
			ok = ok && !paced && r.Algorithm == SlidingLog && l.Burst >= 0 && l.Burst <= l.N && r.Cost <= l.Burst+1
			paced = true
			continue
		}
		ok = ok && l.Burst == 0 && !l.SlowStart
		maxPer = max(maxPer, Micros(l.Per))
	}
	ok = ok && (r.Also == nil || r.validAlso(key)) // multikey.go
	return maxPer, paced, ok
}

// Invalid returns the error of the first rule r breaks, nil if none.
func (r Request) Invalid(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidRequest)
	}
	if len(r.Limits) == 0 {
		return fmt.Errorf("%w: no limits", ErrInvalidRequest)
	}
	if r.Cost < 1 || r.Cost > math.MaxInt32 {
		return fmt.Errorf("%w: cost %d outside 1..%d", ErrInvalidRequest, r.Cost, math.MaxInt32)
	}
	if r.MaxWait < 0 || r.MaxServerWait < 0 {
		return fmt.Errorf("%w: negative max wait %s or max server wait %s", ErrInvalidRequest, r.MaxWait, r.MaxServerWait)
	}
	if r.Allowance < 0 || r.Allowance > MaxAllowance || r.Allowance != 0 && r.Algorithm != SlidingLog {
		return fmt.Errorf("%w: allowance %s: must be 0 to %s, and only SlidingLog takes one", ErrInvalidRequest, r.Allowance, MaxAllowance)
	}
	if err := r.leaseInvalid(); err != nil {
		return err
	}
	if err := r.laneInvalid(); err != nil {
		return err
	}
	paced := false
	for _, l := range r.Limits {
		if l.N < 1 || l.Per < time.Microsecond {
			return fmt.Errorf("%w: limit %s: N must be >= 1 and Per >= 1µs", ErrInvalidRequest, l)
		}
		if r.Cost > l.N {
			return fmt.Errorf("%w: cost %d exceeds limit %s", ErrInvalidRequest, r.Cost, l)
		}
		if !l.Paced && (l.Burst != 0 || l.SlowStart) {
			return fmt.Errorf("%w: limit %s: Burst and SlowStart are for a paced limit", ErrInvalidRequest, l)
		}
		if !l.Paced {
			continue
		}
		if l.Burst < 0 || l.Burst > l.N {
			return fmt.Errorf("%w: limit %s: Burst must be from 0 to N", ErrInvalidRequest, l)
		}
		if r.Cost > l.Burst+1 {
			return fmt.Errorf("%w: cost %d exceeds the burst of limit %s plus one", ErrInvalidRequest, r.Cost, l)
		}
		if paced {
			return fmt.Errorf("%w: more than one paced limit", ErrInvalidRequest)
		}
		paced = true
	}
	if err := r.invalidAlso(key); err != nil { // multikey.go
		return err
	}
	return r.Algorithm.validate(r.Limits)
}

// MaxAllowance bounds Request.Allowance: 5 minutes, far above any lateness a
// sender could measure (the throttle Transport's allowance stays within a
// minute). It also bounds how far ahead a key's state may lie: a time
// beyond a request's MaxWait, MaxAllowance and its longest window is
// repaired as a wrong state (see KeyStateError).
const MaxAllowance = 5 * time.Minute

// Cause says what set a reservation's slot, or its refusal.
type Cause uint8

const (
	CauseNone     Cause = iota // the slot was free at once
	CauseOrder                 // held back to the log's last entry (the order of earlier reservations)
	CauseLimit                 // Request.Limits[Reservation.Limit]
	CauseUpstream              // a pause or an exhausted budget the upstream imposed (Feedback)
	CauseLearned               // a limit learned from the upstream's headers
	CauseInFlight              // no lease free under Request.InFlight
)

var causeNames = [...]string{"none", "order", "limit", "upstream", "learned", "in-flight"}

// String returns the short name of c: "none", "order", "limit", "upstream",
// "learned" or "in-flight".
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("Cause(%d)", uint8(c))
}

// Reservation is the answer of Reserve.
//
// When Allowed, the caller must not send before Delay has passed, should
// send within its Allowance after that (a later send is counted too early),
// and must Cancel if it will not send. When not Allowed, nothing was
// recorded and RetryAfter says when a request of the same cost would have
// been admitted, had nobody else reserved meanwhile.
type Reservation struct {
	Allowed bool
	Cause   Cause
	// Alg is the algorithm that recorded the units, and cost the units
	// (here, beside the flags, so that they take no word of their own:
	// Reserve returns the struct by value on every call).
	Alg   Algorithm
	Cost  int32
	Limit int // index in Request.Limits (or in Also[Part-1].Limits) of the limit that set the slot, when Cause is CauseLimit; 0 otherwise
	// Part says whose limit Limit is, when Cause is CauseLimit: 0 for
	// Request.Limits, i for Request.Also[i-1].Limits; 0 otherwise.
	Part       int
	Delay      time.Duration // allowed: how long from now until the slot
	RetryAfter time.Duration // refused: when a request of the same cost would have been admitted
	// Lease, under Request.InFlight, is the lease an allowed reservation
	// holds, or the ticket of one refused with CauseInFlight that joined
	// the queue (lease.go).
	Lease Lease

	// What Cancel needs: the rate Key; the slot and the time the units
	// were recorded at (the slot, or later with an Allowance), in
	// microseconds on the store's clock; for the counting
	// algorithms, the limits (to find the counters of the slot again);
	// and the theoretical arrival time the reservation left on its paced
	// limit, its own or a learned one (0: none), with the spacing it was
	// reserved at.
	Key     string
	Slot    int64
	Entry   int64
	Limits  []Limit
	TAT     int64
	Spacing int64
	// Moved is when the key last Moved to a stricter learned pace, if one
	// held (see Reshaped).
	Moved int64
	// AlsoKeys are the other keys the units were recorded under (Request.Also).
	AlsoKeys []string
	// AlsoEntries, when not nil, is the entry of each of AlsoKeys, in
	// microseconds on the clock of its key's server: a request whose keys
	// lie in several Cluster slots is recorded by one call per slot, each
	// on its master's clock. Nil: every key recorded at Entry.
	AlsoEntries []int64
	// Units are the request's units (Part.Unit), in order: what Cancel and
	// Settle change, at Entry in each unit's log.
	Units []Unit

	// Yielded, when not empty, is the reservation's member in its key's
	// index of lower-lane slots (Request.Yield): a higher lane may take its
	// slot until the caller confirms it (Request.Confirm) at its wake-up.
	Yielded string
	// Confirmed answers a Request.Confirm: the slot still stands, and
	// nothing else in the reservation is set but Allowed.
	Confirmed bool
	// Took says that the slot was a lower lane's, taken from its waiter;
	// under tenants, that a new request took a later turn's slot (a larger
	// start tag's). A bumped waiter moved along its own lane, or its tags,
	// has not Took.
	Took bool
	// Tag is a tenant's reservation's start tag (Request.Tenant), when
	// Allowed and not Confirmed.
	Tag int64
}

// Decided is the store's clock when it decided an allowed reservation, in
// microseconds on the store's own scale (Redis: its TIME): the slot less
// Delay. A caller that timed its call maps the store's clock onto its own
// with it (throttle wakes at the slot to within its fastest round trip).
// Zero when not Allowed, or from a store that does not say.
func (r Reservation) Decided() int64 {
	if !r.Allowed || r.Slot == 0 {
		return 0
	}
	return r.Slot - r.Delay.Microseconds()
}

// Reshaped is the store's clock (microseconds, as Decided) when the key
// last moved to a stricter learned pace (Learned.Pace: a new one, or a
// smaller burst), when one held at an allowed reservation; zero otherwise. A
// caller that sees a later one than a waiting reservation's knows that
// reservation was placed under the shape before the move.
func (r Reservation) Reshaped() int64 {
	if !r.Allowed {
		return 0
	}
	return r.Moved
}

// Store is the state shared by every transport that limits the same keys.
// Implementations are safe for concurrent use.
//
// A refusal is a Reservation with Allowed false and a nil error; an error means
// the store itself failed (or ctx ended) and says nothing about the limit.
type Store interface {
	// Reserve reserves the earliest time all limits admit Cost units, if
	// that time is at most MaxWait away, and records them (see
	// Request.Allowance for when).
	Reserve(ctx context.Context, key string, req Request) (Reservation, error)
	// Cancel gives back the units of an allowed reservation that will not be
	// sent. It is best effort: removing entries only loosens every window.
	// Call it at most once per reservation: reservations of the same cost
	// at the same entry are alike, so a second Cancel may remove another's
	// units. (The Redis store never re-sends a Cancel on its own; see
	// Redis.Cancel.)
	Cancel(ctx context.Context, r Reservation) error
	// The capabilities: every store has the methods, and Caps says which
	// of them work; the others return ErrUnsupported.
	Feedback
	Leases
	Inspector
	Settler
	// Caps says what the store is and can do. The engine reads it when it
	// is built, never by a type assertion on the store.
	Caps() Caps
}

// Admin is what the operator's tool (cmd/throttle) asks of the Redis store
// beyond a Store: the names of a rate key's Redis keys, their deletion (or
// of its feedback alone), and the source of every script the store runs.
// Only the Redis store has it.
type Admin interface {
	Store
	Keys(key string) []string
	// SeenKey names the sliding log's seen mark, which Delete leaves: the
	// log was written while the fleet ran (a log absent beside it was
	// reset or lost).
	SeenKey(key string) string
	Delete(ctx context.Context, key string) (int64, error)
	DeleteFeedback(ctx context.Context, key string) (int64, error)
	Scripts() map[string]string
}

// Caps is what a store is and can do.
type Caps struct {
	// Feedback: Pause and Learn keep what the upstream said (Feedback).
	Feedback bool
	// Leases: Await, Release and Renew keep a cap on requests in flight
	// (Request.InFlight; Leases).
	Leases bool
	// Usage: Usage reports a key's state (Inspector).
	Usage bool
	// Sharded: the store spreads its keys over several servers by hash tag
	// (a Redis Cluster or Ring): the keys of one request with Also that do
	// not share a hash tag cost one store call per slot.
	Sharded bool
	// OneClock: every key's times come from one clock (one Redis server,
	// or this process), so one offset maps them onto the caller's.
	OneClock bool
	// InProcess: the state lives in this process, and a call waits on
	// nothing but a lock (no timeout is worth its timer).
	InProcess bool
}

// ErrUnsupported is returned by a method of a capability the store does not
// have (see Caps).
var ErrUnsupported = errors.New("store: not supported by this store")

// Micros converts a window to whole microseconds, rounding up so that a window
// is never shortened.
func Micros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond != 0 {
		us++
	}
	return us
}

// FromMicros converts microseconds to a Duration.
func FromMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// MicrosDown converts a wait cap to whole microseconds, rounding down so that
// a wait never passes the cap.
func MicrosDown(d time.Duration) int64 { return int64(d / time.Microsecond) }
