package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/clusterslot"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/script"
)

// This file reserves a request whose keys (Request.Also) lie in several
// Cluster slots (on a Ring: several hash tags). A script may only touch the
// keys of one slot, so each slot other than the own key's is reserved by a
// call of its own (slots.lua), in order, then the own key's slot with the
// request's own key, its units, feedback and lease (the log's script).
//
// The masters of a Cluster have clocks of their own, so a time found on one
// means nothing to another: times travel between calls as this process's
// times, from the durations the calls return. A call asked at a and
// answered at r with a wait d has its slot between a + d and r + d here.
// So:
//
//   - each call is given "after": its slot is never before the latest
//     slot the calls before it found (r + d, the latest it may be), so the
//     own key's slot, the last, is at or after every other one, and the
//     caller, which waits for it, sends at or after every slot;
//   - each other slot records its entries an extra allowance later (a few
//     round trips, measured), so that its entry is at or after the send:
//     at the latest, the own slot's r + d plus the allowance, or the end of
//     the call when that is later;
//   - an entry found short of that (the own key's limits set a later slot,
//     or a round trip took longer) is moved: one call removes it and
//     reserves again, every window checked at the new time; and if that
//     call finds a slot later than the own one (a conflict: others filled
//     the window meanwhile), every reservation is given back and the
//     request starts again from that slot, at most maxSlotRounds times.
//
// Cost: one call per slot; plus one per slot whose entry moves; a conflict
// costs a cancel per slot and a new round.

// maxSlotRounds bounds the rounds of a reservation over several slots: a
// request that meets a conflict in each is refused.
const maxSlotRounds = 3

// causeAfter is also.lua's cause AFTER: the slot was set by "after", the
// latest slot of the request's other calls. It never leaves this file.
const causeAfter = 6

var (
	reservePartsScript = newScript(script.ReserveParts())
	cancelPartsScript  = newScript(script.CancelParts())
)

func init() {
	alsoScripts["reserve parts"] = reservePartsScript
	alsoScripts["cancel parts"] = cancelPartsScript
}

// slotOf names the Cluster slot of the Redis key name (its hash tag on a
// Ring, whose shards hash the tag their own way); "" when the store is not
// sharded.
func (r *Redis) slotOf(name string) string {
	switch r.client.(type) {
	case *redis.ClusterClient:
		return strconv.Itoa(clusterslot.Of(name))
	case *redis.Ring:
		return "{" + clusterslot.HashTag(name)
	}
	return ""
}

// slotGroups splits req.Also by slot: own lists the parts in the slot of
// key (its own units always are; a unit under another key is in that
// key's), others the parts of each other slot, in the order of their first
// part. others is nil when there is no other slot.
func (r *Redis) slotGroups(key string, req *contract.Request) (own []int, others [][]int) {
	mine := r.slotOf(r.logKey(key))
	if mine == "" {
		return nil, nil
	}
	var ids []string
	for i := range req.Also {
		p := &req.Also[i]
		if p.Unit != "" && p.Key == "" {
			own = append(own, i)
			continue
		}
		id := r.slotOf(r.logKey(p.Key)) // a unit's log shares its key's tag (unitKey)
		if id == mine {
			own = append(own, i)
			continue
		}
		j := slices.Index(ids, id)
		if j < 0 {
			ids, others, j = append(ids, id), append(others, nil), len(ids)
		}
		others[j] = append(others[j], i)
	}
	return own, others
}

// local is this process's clock, on which the calls' durations are laid
// end to end (WithClientTime's when given: the servers' then).
func (r *Redis) local() time.Time {
	if r.clock != nil {
		return r.clock()
	}
	return time.Now()
}

// observeTrip keeps a round trip of a slot's call: the latest, or, when
// shorter, an eighth of the way from the one kept towards it.
func (r *Redis) observeTrip(d time.Duration) {
	old := r.trip.Load()
	if n := int64(d); n > old {
		r.trip.Store(n)
	} else {
		r.trip.Store(old - (old-n)/8)
	}
}

// slotExtra is how much later than its slot plus the allowance a slot other
// than the own key's records: twice a round trip per call of the request,
// which is about what lies between that call and the end of the own one.
func (r *Redis) slotExtra(calls int) time.Duration {
	return time.Duration(2 * int64(calls) * r.trip.Load())
}

// why is what set a slot, as the caller's request numbers it.
type why struct {
	cause       contract.Cause
	part, limit int
}

// held is one other slot's reservation: its parts (indexes in
// Request.Also), its entry on its master's clock, and on this process's
// clock the earliest the entry may be.
type held struct {
	parts    []int
	entry    int64
	entryLow time.Time
}

// partsReply is the reply of the parts script.
type partsReply struct {
	allowed                  bool
	wait, slot, limit, entry int64
	cause                    int64
	asked, replied           time.Time
}

// reserveSlots reserves req under key and every part, the parts of each
// slot other than key's in a call of their own (see the top of the file).
func (r *Redis) reserveSlots(ctx context.Context, key string, req contract.Request, own []int, others [][]int) (contract.Reservation, error) {
	start := r.local()
	extra := r.slotExtra(len(others) + 1)
	var floor time.Time // every slot is at or after it
	var set why         // what set floor
	took := req.Held.ID == ""
	var lease contract.Lease // a lease the rounds took, under InFlight
	for range maxSlotRounds {
		res, again, err := r.slotRound(ctx, key, req, own, others, start, extra, &floor, &set, &lease)
		if err != nil || !again {
			if (err != nil || !res.Allowed) && took && lease.Held() {
				_ = r.Release(context.WithoutCancel(ctx), lease)
			}
			return res, err
		}
		if lease.Held() {
			req.Held = lease // the next round keeps the lease this one took
		}
	}
	if took && lease.Held() {
		_ = r.Release(context.WithoutCancel(ctx), lease)
	}
	return refusal(key, req, set, max(floor.Sub(r.local()), 0)), nil
}

// refusal is the refusal of req, set by w, to retry after wait.
func refusal(key string, req contract.Request, w why, wait time.Duration) contract.Reservation {
	res := contract.Reservation{Key: key, Cost: int32(req.Cost), Cause: w.cause, RetryAfter: wait}
	if w.cause == contract.CauseLimit {
		res.Part, res.Limit = w.part, w.limit
	}
	return res
}

// slotRound is one round of reserveSlots: every other slot, then the own
// one, then the moves. again says a conflict gave everything back: floor
// and set say where the next round starts.
func (r *Redis) slotRound(ctx context.Context, key string, req contract.Request, own []int, others [][]int,
	start time.Time, extra time.Duration, floor *time.Time, set *why, taken *contract.Lease) (res contract.Reservation, again bool, err error) {
	holds := make([]held, 0, len(others))
	var ownRes *contract.Reservation
	var longest time.Duration // the longest call of the round: a move's entry covers two more
	// giveBack cancels what the round holds (best effort: removing
	// entries only loosens the windows).
	giveBack := func() {
		cctx := context.WithoutCancel(ctx)
		for _, h := range holds {
			_ = r.cancelParts(cctx, &req, h.parts, h.entry, req.Cost)
		}
		if ownRes != nil {
			own := *ownRes
			own.AlsoEntries = nil
			_ = r.cancel(cctx, own)
		}
	}
	for _, g := range others {
		after := max(floor.Sub(r.local()), 0)
		v, err := r.reserveParts(ctx, &req, g, start, extra, after, time.Time{}, 0)
		if err != nil {
			giveBack()
			return contract.Reservation{}, false, err
		}
		longest = max(longest, v.replied.Sub(v.asked))
		w := v.why(&req, g, *set)
		if !v.allowed {
			giveBack()
			return refusal(key, req, w, contract.FromMicros(v.wait)), false, nil
		}
		if up := v.replied.Add(contract.FromMicros(v.wait)); up.After(*floor) {
			*floor, *set = up, w
		}
		holds = append(holds, held{parts: g, entry: v.entry, entryLow: v.low()})
	}

	// The own key's slot, last: at or after every other one.
	a := r.local()
	mine := req
	mine.Also = make([]contract.Part, len(own))
	for i, j := range own {
		mine.Also[i] = req.Also[j]
	}
	mine.MaxWait = max(req.MaxWait-a.Sub(start), 0)
	call, p := r.reserveCall(key, mine)
	call = r.alsoCall(call, key, &mine, p >= 0)
	call.args[len(call.args)-5] = contract.Micros(max(floor.Sub(a), 0)) // also.lua's after
	var lease contract.Lease
	if mine.InFlight > 0 {
		lease = r.withLease(&call, key, mine) // lease.go
	}
	reply, err := r.runReserve(ctx, key, mine, call, false)
	replied := r.local()
	if err != nil {
		giveBack()
		return contract.Reservation{}, false, err
	}
	byAfter := false
	if len(reply) >= 5 && reply[4] == int64(causeAfter) {
		reply[4], byAfter = int64(contract.CauseNone), true
	}
	if mine.InFlight > 0 {
		res, err = r.parseLeased(key, mine, lease, reply)
	} else {
		res, err = r.parseReserve(key, mine, reply)
	}
	if err != nil {
		giveBack()
		return contract.Reservation{}, false, err
	}
	r.observeTrip(replied.Sub(a))
	longest = max(longest, replied.Sub(a))
	if res.Part > 0 {
		res.Part = own[res.Part-1] + 1
	}
	if byAfter {
		// The slot the other keys set: theirs is the cause.
		res.Cause, res.Part, res.Limit = set.cause, 0, 0
		if set.cause == contract.CauseLimit {
			res.Part, res.Limit = set.part, set.limit
		}
	}
	if !res.Allowed {
		giveBack()
		return res, false, nil
	}
	ownRes = &res
	if res.Lease.Held() {
		*taken = res.Lease
	}
	if !byAfter {
		*set = why{res.Cause, res.Part, res.Limit}
	}
	ownUp, ownLow := replied.Add(res.Delay), a.Add(res.Delay)

	// Every other slot's entry at or after the latest the send may be.
	for pass := 0; ; pass++ {
		due := maxTime(ownUp, r.local()).Add(req.Allowance)
		moved := false
		for i := range holds {
			h := &holds[i]
			if !h.entryLow.Before(due) {
				continue
			}
			if pass == 2 {
				// Round trips grew faster than the moves: start again.
				giveBack()
				*floor = maxTime(*floor, ownUp)
				return contract.Reservation{}, true, nil
			}
			moved = true
			// The send may come once the moves are done: the entry
			// covers this call and the next.
			v, err := r.reserveParts(ctx, &req, h.parts, start, extra, 0, due.Add(extra+2*longest), h.entry)
			if err != nil {
				giveBack()
				return contract.Reservation{}, false, err
			}
			longest = max(longest, v.replied.Sub(v.asked))
			if !v.allowed {
				w := v.why(&req, h.parts, *set)
				h.parts = nil // its entries went with the move
				giveBack()
				return refusal(key, req, w, contract.FromMicros(v.wait)), false, nil
			}
			h.entry, h.entryLow = v.entry, v.low()
			if up := v.replied.Add(contract.FromMicros(v.wait)); v.wait > 0 && up.After(maxTime(ownLow, v.replied)) {
				// A conflict: the windows of this slot now allow it
				// only after the own slot.
				giveBack()
				*floor, *set = maxTime(*floor, up), v.why(&req, h.parts, *set)
				return contract.Reservation{}, true, nil
			}
		}
		if !moved {
			break
		}
	}

	// The reservation: the own key's, with every other key and its entry.
	entries := make(map[int]int64, len(req.Also))
	for _, h := range holds {
		for _, j := range h.parts {
			entries[j] = h.entry
		}
	}
	res.AlsoKeys, res.AlsoEntries, res.Units = nil, nil, req.UnitsOf()
	for j := range req.Also {
		if req.Also[j].Unit != "" {
			continue
		}
		e, ok := entries[j]
		if !ok {
			e = res.Entry
		}
		res.AlsoKeys, res.AlsoEntries = append(res.AlsoKeys, req.Also[j].Key), append(res.AlsoEntries, e)
	}
	return res, false, nil
}

// reserveParts runs the parts script on the parts g of req: a slot at or
// after now + after, recorded at or after recAt (zero: no bound) with the
// request's allowance plus extra; with old, a move of the entries at old.
func (r *Redis) reserveParts(ctx context.Context, req *contract.Request, g []int, start time.Time, extra, after time.Duration,
	recAt time.Time, old int64) (partsReply, error) {
	parts := make([]contract.Part, len(g))
	for i, j := range g {
		parts[i] = req.Also[j]
	}
	keys := r.alsoKeys("", parts) // a unit here is under its part's Key
	a := r.local()
	var recAfter int64
	if !recAt.IsZero() {
		recAfter = max(contract.Micros(recAt.Sub(a)), 1)
	}
	oldArg := "0"
	if old != 0 {
		oldArg = strconv.FormatInt(old, 10)
	}
	args := []any{req.Cost, contract.MicrosDown(max(req.MaxWait-a.Sub(start), 0)), r.nowArg(), 0, contract.Micros(req.Allowance + extra)}
	call := scriptCall{reservePartsScript, keys, alsoArgs(args, parts, 0, contract.Micros(after), recAfter, oldArg)}
	run := func() ([]any, error) {
		switch p, ok := r.client.(processor); {
		case r.ackReplicas > 0:
			return r.reserveAcked(ctx, call)
		case ok && old != 0:
			// A move removes entries: sent at most once, as a Cancel.
			return evalSHA(ctx, []scriptCall{call}, func(cmds []*redis.Cmd) {
				for _, cmd := range cmds {
					_ = p.Process(ctx, onceCmd{cmd})
				}
			})[0].Slice()
		default:
			return call.script.Run(ctx, r.client, call.keys, call.args...).Slice()
		}
	}
	reply, err := run()
	if err != nil && badState(err) {
		for _, j := range g {
			if req.Also[j].Unit == "" { // a unit's log is rebuilt by no repair, as repairAlso
				_ = r.repair(ctx, req.Also[j].Key, contract.SlidingLog, false, req.PartHorizon(&req.Also[j]))
			}
		}
		if reply, err = run(); err != nil && badState(err) {
			return partsReply{}, &KeyStateError{Key: req.Also[g[0]].Key, Reason: "still wrong after a repair", Err: err}
		}
	}
	replied := r.local()
	if err != nil {
		r.failed(err)
		return partsReply{}, fmt.Errorf("store: redis reserve: %w", err)
	}
	r.observeTrip(replied.Sub(a))
	v, err := int64s(reply)
	if err != nil {
		return partsReply{}, fmt.Errorf("store: redis reserve: %w", err)
	}
	out := partsReply{allowed: v[0] == 1, wait: v[1], slot: v[2], limit: v[3], cause: v[4], entry: v[5], asked: a, replied: replied}
	limitOK := out.cause != int64(contract.CauseLimit) && out.limit == 0 ||
		out.cause == int64(contract.CauseLimit) && (&contract.Request{Also: parts}).LimitNumber(out.limit)
	if v[0] != 0 && v[0] != 1 || out.wait < 0 || out.allowed && (out.slot <= 0 || out.entry < out.slot) || !limitOK ||
		out.cause != int64(contract.CauseNone) && out.cause != int64(contract.CauseOrder) && out.cause != int64(contract.CauseLimit) && out.cause != causeAfter {
		return partsReply{}, fmt.Errorf("store: redis reserve: unexpected reply %v", v)
	}
	return out, nil
}

// low is the earliest the entry of an allowed reply may be on this
// process's clock.
func (v partsReply) low() time.Time {
	return v.asked.Add(contract.FromMicros(v.wait + v.entry - v.slot))
}

// why says what set v's slot, numbered as req numbers its parts (g, the
// parts of the call); before, what set the slot it was given as after.
func (v partsReply) why(req *contract.Request, g []int, before why) why {
	switch v.cause {
	case causeAfter:
		return before
	case int64(contract.CauseLimit):
		parts := make([]contract.Part, len(g))
		for i, j := range g {
			parts[i] = req.Also[j]
		}
		part, limit, _ := (&contract.Request{Also: parts}).PartOf(int(v.limit))
		return why{contract.CauseLimit, g[part-1] + 1, limit}
	}
	return why{cause: contract.Cause(v.cause)}
}

// cancelParts removes cost entries at entry from the logs of req's parts g,
// and settles their units to 0.
func (r *Redis) cancelParts(ctx context.Context, req *contract.Request, g []int, entry int64, cost int) error {
	var keys []string
	var units []contract.Unit
	for _, j := range g {
		if p := &req.Also[j]; p.Unit != "" {
			units = append(units, contract.Unit{Name: p.Unit, Key: p.Key, Cost: int64(p.Cost)})
		} else {
			keys = append(keys, p.Key)
		}
	}
	return r.cancelKeys(ctx, keys, units, entry, cost)
}

// cancelKeys removes cost entries at entry from the logs of keys, and
// settles units (under keys of that slot, never paced) to 0, all in one
// slot, in one call sent at most once (see Cancel).
func (r *Redis) cancelKeys(ctx context.Context, keys []string, units []contract.Unit, entry int64, cost int) error {
	if len(keys) == 0 && len(units) == 0 {
		return nil
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = r.logKey(k)
	}
	names = r.unitKeys(names, contract.Reservation{}, units)
	args := []any{strconv.FormatInt(entry, 10), cost, len(keys), r.nowArg()}
	for _, u := range units {
		args = append(args, u.Cost, 0, u.Spacing)
	}
	call := scriptCall{cancelPartsScript, names, args}
	var err error
	if p, ok := r.client.(processor); ok {
		err = runOnce(ctx, p, call)
	} else {
		err = call.script.Run(ctx, r.client, call.keys, call.args...).Err()
	}
	if err != nil {
		r.failed(err)
		return fmt.Errorf("store: redis cancel: %w", err)
	}
	return nil
}

// cancelSlots is Cancel of a reservation recorded by one call per slot: a
// cancel per other slot, then the own key's with the keys of its slot.
func (r *Redis) cancelSlots(ctx context.Context, res contract.Reservation) error {
	mine := r.slotOf(r.logKey(res.Key))
	type group struct {
		slot  string
		entry int64
	}
	var order []group
	keys := map[group][]string{}
	units := map[group][]contract.Unit{}
	own := res
	own.AlsoKeys, own.AlsoEntries, own.Units = nil, nil, nil
	for i, k := range res.AlsoKeys {
		g := group{r.slotOf(r.logKey(k)), res.AlsoEntries[i]}
		if g.slot == mine && g.entry == res.Entry {
			own.AlsoKeys = append(own.AlsoKeys, k)
			continue
		}
		if _, ok := keys[g]; !ok {
			order = append(order, g)
		}
		keys[g] = append(keys[g], k)
	}
	for _, u := range res.Units {
		g := group{mine, res.Entry}
		if u.Key != "" {
			g = group{r.slotOf(r.logKey(u.Key)), res.UnitEntry(u)}
		}
		if g.slot == mine && g.entry == res.Entry {
			own.Units = append(own.Units, u)
			continue
		}
		units[g] = append(units[g], u) // its key's group: ordered above
	}
	var errs []error
	for _, g := range order {
		errs = append(errs, r.cancelKeys(ctx, keys[g], units[g], g.entry, int(res.Cost)))
	}
	errs = append(errs, r.cancel(ctx, own))
	return errors.Join(errs...)
}

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
