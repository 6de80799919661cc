package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/script"
)

// Priority lanes (lanes.lua): a reservation with a lane, or one that
// yields, runs the lanes' script with the key's index of yielding slots
// and its bumped set beside the log.

var (
	lanesScript        = newScript(script.Lanes(false))
	lanesPacedScript   = newScript(script.Lanes(true))
	tenantsScript      = newScript(script.Tenants(false))
	tenantsPacedScript = newScript(script.Tenants(true))
	cancelLanesScript  = newScript(script.CancelLanes())
)

// laneTokens names the yielding reservations of this process: a random
// prefix, so that processes never share a token, and a counter.
var laneTokens struct {
	prefix string
	n      atomic.Uint64
}

func init() {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	laneTokens.prefix = hex.EncodeToString(b[:]) + "."
}

// laneToken returns a new token.
func laneToken() string {
	return laneTokens.prefix + strconv.FormatUint(laneTokens.n.Add(1), 36)
}

// laneKeys are the names of key's index of yielding slots (a ZSET) and of
// its bumped set (a SET), under the key's hash tag.
func (r *Redis) laneKeys(key string) (idx, bumped string) {
	return r.logKey(key) + ":lane", r.logKey(key) + ":bumped"
}

// tenantsKey is the name of key's set of active tenants (a ZSET), under
// the key's hash tag: one key however many tenants.
func (r *Redis) tenantsKey(key string) string { return r.logKey(key) + ":tenants" }

// laned reports whether req goes through the lanes' script.
func laned(req *contract.Request) bool { return req.Lane != 0 || req.Yield }

// reserveLanes is reserve for a request with a lane or that yields: one
// call of the lanes' script.
func (r *Redis) reserveLanes(ctx context.Context, key string, req contract.Request) (contract.Reservation, error) {
	call, p := r.reserveCall(key, req)
	idx, bumped := r.laneKeys(key)
	token := laneToken()
	if req.Tenant != "" {
		token = contract.TenantToken(token, req.Tenant) // a retake skips its tenant's slots (lanes.lua)
	}
	yield := 0
	if req.Yield {
		yield = 1
	}
	call.script = lanesScript
	if p >= 0 {
		call.script = lanesPacedScript
	}
	call.keys = append(call.keys, idx, bumped)
	call.args = append(call.args, req.Lane, yield, token, req.Confirm)
	if req.Tenant != "" {
		call.script = tenantsScript
		if p >= 0 {
			call.script = tenantsPacedScript
		}
		call.keys = append(call.keys, r.tenantsKey(key))
		var again any = ""
		if req.Again {
			again = req.Tag
		}
		call.args = append(call.args, req.Tenant, req.Step, again)
	}
	reply, err := r.runReserve(ctx, key, req, call, false)
	if err != nil {
		return contract.Reservation{}, err
	}
	var tag int64
	if len(reply) == 11 && req.Tenant != "" {
		var ok bool
		if tag, ok = reply[10].(int64); !ok || tag < 0 {
			return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected tenant tag %v", reply[10])
		}
		reply = reply[:10]
	}
	if len(reply) != 10 {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected reply of %d elements", len(reply))
	}
	flags, ok := reply[9].(int64)
	if !ok || flags < 0 || flags > 15 || flags&laneTook != 0 && flags&laneTaken == 0 {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected lane flags %v", reply[9])
	}
	if flags&laneConfirmed != 0 {
		if flags != laneConfirmed || req.Confirm == "" {
			return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected lane flags %d", flags)
		}
		return contract.Reservation{Allowed: true, Confirmed: true, Key: key, Cost: int32(req.Cost)}, nil
	}
	var res contract.Reservation
	if flags&laneTaken != 0 {
		// A slot taken from a waiter: its paced time stays the
		// waiter's, so the reply has none.
		v, err := int64s(reply[:9])
		if err != nil || v[0] != 1 || v[1] < 0 || v[2] <= 0 || v[5] < v[2] || v[3] != 0 || v[4] != int64(contract.CauseOrder) || v[6] != 0 {
			return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected reply %v", reply)
		}
		res = contract.Reservation{Allowed: true, Cause: contract.CauseOrder, Key: key, Cost: int32(req.Cost),
			Delay: contract.FromMicros(v[1]), Slot: v[2], Entry: v[5], Took: flags&laneTook != 0}
	} else {
		var err error
		if res, err = r.parseReserve(key, req, trimZeros(reply[:9])); err != nil {
			return res, err
		}
	}
	if !res.Allowed && flags != 0 {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected lane flags %d on a refusal", flags)
	}
	if req.Tenant != "" && res.Allowed {
		res.Tag = tag
	}
	if flags&laneYielded != 0 {
		if req.Tenant != "" {
			res.Yielded = contract.TenantMember(token, tag, &req, res.Entry)
		} else {
			res.Yielded = contract.LineMember(token, &req, res.Slot, res.Entry)
		}
	}
	return res, nil
}

// The flags of the lanes' reply (lanes.lua).
const (
	laneYielded   = 1
	laneTaken     = 2 // a waiter's slot
	laneConfirmed = 4
	laneTook      = 8 // a lower lane's, or a larger tag's by a new request
)

// cancelLanesCall is the cancel of a yielding reservation: nothing is
// removed when a higher lane took its slot.
func (r *Redis) cancelLanesCall(res contract.Reservation) scriptCall {
	idx, bumped := r.laneKeys(res.Key)
	return scriptCall{cancelLanesScript, []string{r.logKey(res.Key), r.seenKey(res.Key), idx, bumped},
		[]any{strconv.FormatInt(res.Entry, 10), res.Cost, res.Yielded}}
}

// trimZeros drops the trailing zeros of a lanes' reply (every field
// present) down to the reserve scripts' shortest, as parseReserve reads
// them: entry, then tat and spacing, then moved.
func trimZeros(v []any) []any {
	n := len(v)
	for n > 6 && v[n-1] == int64(0) {
		n--
	}
	if n == 7 { // tat without its spacing cannot be: keep both
		n = 8
	}
	return v[:n]
}
