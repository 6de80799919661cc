package contract

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Priority lanes (docs/lanes.md): a request of a higher lane may take the
// slot a waiter of a lower lane holds, when that slot is earlier than its
// own; the waiter learns it when it confirms its slot, at its wake-up, and
// takes the next slot of its lane in the same call. The log itself is not
// changed: a slot's entry counts in every window as before, only its owner
// changes, so no window holds more than N.
//
// A reservation that may be taken (Request.Yield) is also recorded in a
// small per-key index of the slots of waiting lower-lane reservations; the
// store names it by a member (Reservation.Yielded) that the waiter passes
// back to confirm (Request.Confirm) or to Cancel.

// MaxLane is the highest lane a request may ask for.
const MaxLane = 15

// LaneGuard is how near a lower lane's slot may be and still be taken: a
// slot due sooner is left to its waiter, which is about to confirm it.
const LaneGuard = 2 * time.Millisecond

// LaneAllowance is the least allowance a yielding reservation is recorded
// with (when it takes one at all): a higher lane takes only a slot whose
// allowance covers its own, and a process's allowance is its measured
// lateness, so a backfill process that measured 1ms would otherwise leave
// its slots to no interactive process that measured 3ms. It costs the
// yielding lanes' entries that much later in the log, a 0.5% of a window
// of a second at most.
const LaneAllowance = 5 * time.Millisecond

// YieldAllowance is the allowance r's reservation is recorded with: its
// own, raised to LaneAllowance when it yields.
func (r *Request) YieldAllowance() time.Duration {
	if r.Yield && r.Allowance > 0 {
		return max(r.Allowance, LaneAllowance)
	}
	return r.Allowance
}

// laned reports whether r uses lanes at all.
func (r *Request) laned() bool { return r.Lane != 0 || r.Yield || r.Confirm != "" || r.tenanted() }

// laneValid reports whether r's lane fields are well formed: a lane from 0
// to MaxLane, on a sliding log without more keys or a cap (lanes own the
// slots of one log), and a Confirm only with Yield.
func (r *Request) laneValid() bool {
	if !r.laned() {
		return true
	}
	if r.tenanted() && !r.tenantValid() {
		return false
	}
	return r.Lane >= 0 && r.Lane <= MaxLane && r.Algorithm == SlidingLog && r.Also == nil && r.InFlight == 0 &&
		(r.Confirm == "" || r.Yield)
}

// laneInvalid returns the error of a lane field of r, nil if none.
func (r *Request) laneInvalid() error {
	if r.laneValid() {
		return nil
	}
	if err := r.tenantInvalid(); err != nil {
		return err
	}
	return fmt.Errorf("%w: lane %d: must be 0 to %d, on a sliding log without Also or InFlight, and Confirm only with Yield",
		ErrInvalidRequest, r.Lane, MaxLane)
}

// LaneMember is the name of a yielding reservation in its key's index of
// lower-lane slots: the store's token for it, its lane, its cost, the
// allowance it is recorded with (YieldAllowance, µs: a taker must send
// within it, a paced time counted the reservation from it) and its entry.
// lanes.lua builds the same string.
func LaneMember(token string, r *Request, entry int64) string {
	return member(token, int64(r.Lane), r, entry)
}

// member is LaneMember with rank, a lane or a start tag.
func member(token string, rank int64, r *Request, entry int64) string {
	var b strings.Builder
	b.Grow(len(token) + 40)
	b.WriteString(token)
	for _, v := range [...]int64{rank, int64(r.Cost), Micros(r.YieldAllowance()), entry} {
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(v, 10))
	}
	return b.String()
}

// LaneToken is the token of a lane's yielding reservation: a token
// (without '=', ';' or ':') and since, where its waiter stands in its
// lane's line: the slot it first held, kept as it is bumped along the line
// (a bumped waiter takes only the slots of its lane's waiters behind it).
// lanes.lua builds the same string. '=' orders as ':' does against a
// token's characters, so members order in the index as their tokens alone
// would.
func LaneToken(token string, since int64) string {
	return token + "=" + strconv.FormatInt(since, 10)
}

// LineMember is the member of r's yielding reservation of a lane at slot:
// LaneMember with LaneToken(token, since), since the place in line of the
// member r confirms (a bumped waiter keeps its place), else slot. The
// stores build it as lanes.lua does.
func LineMember(token string, r *Request, slot, entry int64) string {
	since := slot
	if s := MemberSince(r.Confirm); s >= 0 {
		since = s
	}
	return LaneMember(LaneToken(token, since), r, entry)
}

// MemberSince is the since of a member made with LaneToken; -1 if none.
func MemberSince(m string) int64 {
	end := strings.IndexByte(m, ':')
	if end < 0 {
		return -1
	}
	i := strings.IndexByte(m[:end], '=')
	if i < 0 {
		return -1
	}
	v, err := strconv.ParseInt(m[i+1:end], 10, 64)
	if err != nil || v < 0 {
		return -1
	}
	return v
}
