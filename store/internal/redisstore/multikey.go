package redisstore

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/script"
)

// This file is what Request.Also adds to a reservation: its arguments to the
// Redis script (internal/script/also.lua) and the names of its keys. Keys in
// other Cluster slots than the request's own key are slots.go's.

// alsoKeys returns the KEYS of the parts' logs, a unit's named after key,
// or after its part's Key when set (its sum after it, and its pace key
// when paced: units.lua).
func (r *Redis) alsoKeys(key string, parts []contract.Part) []string {
	keys := make([]string, 0, len(parts))
	for i := range parts {
		p := &parts[i]
		if p.Unit == "" {
			keys = append(keys, r.logKey(p.Key))
			continue
		}
		k := key
		if p.Key != "" {
			k = p.Key
		}
		keys = append(keys, r.unitKey(k, p.Unit), r.unitKey(k, p.Unit)+":sum")
		if p.UnitPace() >= 0 {
			keys = append(keys, r.unitKey(k, p.Unit)+":pace")
		}
	}
	return keys
}

// unitKey is the name of the Redis key, a LIST of pairs (time, weight),
// that holds the log of a unit of a rate key: beside its log, under its
// hash tag.
func (r *Redis) unitKey(key, unit string) string { return r.logKey(key) + ":u:" + unit }

// The scripts of a request with more keys (also.lua), by the names
// Scripts gives them.
var (
	reserveAlsoScript      = newScript(script.Reserve("log+also"))
	reservePacedAlsoScript = newScript(script.Reserve("paced+also"))
	cancelAlsoScript       = newScript(script.CancelAlso(false))
	cancelPacedAlsoScript  = newScript(script.CancelAlso(true))
	alsoScripts            = map[string]luaScript{
		"reserve log+also": reserveAlsoScript, "reserve paced+also": reservePacedAlsoScript,
		"cancel also": cancelAlsoScript, "cancel paced also": cancelPacedAlsoScript,
	}
)

// alsoCall turns the reserve call of the request's own key into the call
// with its parts: their arguments after its own, their logs after its keys.
func (r *Redis) alsoCall(call scriptCall, key string, req *contract.Request, paced bool) scriptCall {
	call.script = reserveAlsoScript
	if paced {
		call.script = reservePacedAlsoScript
	}
	call.keys = append(call.keys, r.alsoKeys(key, req.Also)...)
	call.args = alsoArgs(call.args, req.Also, len(req.Limits), 0, 0, "0")
	return call
}

// cancelAlsoCall turns the cancel call of a reservation's own key into the
// call that also removes its entries from the other keys' logs.
func (r *Redis) cancelAlsoCall(call scriptCall, res contract.Reservation) scriptCall {
	call.script = cancelAlsoScript
	if res.TAT != 0 {
		call.script = cancelPacedAlsoScript
	}
	for _, k := range res.AlsoKeys {
		call.keys = append(call.keys, r.logKey(k))
	}
	call.args = append(call.args, len(res.AlsoKeys))
	return call
}

// repairAlso repairs the parts' logs after the script found a key in a
// wrong state (it does not say which): off the common path. A part still
// wrong after it fails the retry (see healed).
func (r *Redis) repairAlso(ctx context.Context, req *contract.Request) {
	for i := range req.Also {
		if req.Also[i].Unit == "" { // a unit's log is rebuilt by no repair: the next reply says
			_ = r.repair(ctx, req.Also[i].Key, contract.SlidingLog, false, req.PartHorizon(&req.Also[i]))
		}
	}
}

// alsoArgs appends the arguments of parts to the reserve script's
// (also.lua): base is the number of the request's own limits; after,
// recAfter and old are also.lua's (microseconds, and an entry; 0, 0 and "0"
// but for the keys in other Cluster slots, slots.go).
func alsoArgs(args []any, parts []contract.Part, base int, after, recAfter int64, old string) []any {
	n := 0
	for i := range parts {
		p := &parts[i]
		windows, pidx := len(p.Limits), p.UnitPace()
		if pidx >= 0 {
			windows--
		}
		if p.Unit == "" {
			args = append(args, windows, 0, 0, 0, 0, 0, 0)
		} else if pidx < 0 {
			args = append(args, windows, 1, p.Cost, 0, 0, 0, p.UnitWindow())
		} else {
			l := p.Limits[pidx]
			args = append(args, windows, 1, p.Cost, l.Interval(), l.Burst, pidx+1, p.UnitWindow())
		}
		for _, l := range p.Limits {
			if !l.Paced {
				args = append(args, l.N, contract.Micros(l.Per))
			}
		}
		n += 7 + 2*windows
	}
	return append(args, after, recAfter, old, base, n)
}

// Sharded reports whether the store spreads its keys over several servers
// by hash tag (its client is a *redis.ClusterClient or a *redis.Ring): the
// keys of one request with Also that do not share a slot are then reserved
// by one call per slot (slots.go).
func (r *Redis) Sharded() bool {
	switch r.client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// hasHashTag reports whether key starts with its own Redis hash tag, a
// non-empty "{tag}" followed by more: the Redis store then names its keys
// with key as it is, so that keys sharing the tag share a Cluster slot.
// Any other key k is named "{k}", its own tag.
func hasHashTag(key string) bool {
	if len(key) < 4 || key[0] != '{' {
		return false
	}
	end := strings.IndexByte(key, '}')
	return end > 1 && end < len(key)-1
}
