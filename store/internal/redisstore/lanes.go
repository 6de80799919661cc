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
	lanesScript       = newScript(script.Lanes())
	cancelLanesScript = newScript(script.CancelLanes())
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

// laned reports whether req goes through the lanes' script.
func laned(req *contract.Request) bool { return req.Lane != 0 || req.Yield }

// reserveLanes is reserve for a request with a lane or that yields: one
// call of the lanes' script.
func (r *Redis) reserveLanes(ctx context.Context, key string, req contract.Request) (contract.Reservation, error) {
	call, _ := r.reserveCall(key, req)
	idx, bumped := r.laneKeys(key)
	token := laneToken()
	yield := 0
	if req.Yield {
		yield = 1
	}
	call.script = lanesScript
	call.keys = append(call.keys, idx, bumped)
	call.args = append(call.args, req.Lane, yield, token, req.Confirm)
	reply, err := r.runReserve(ctx, key, req, call, false)
	if err != nil {
		return contract.Reservation{}, err
	}
	if len(reply) != 10 {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected reply of %d elements", len(reply))
	}
	flags, ok := reply[9].(int64)
	if !ok || flags < 0 || flags > 7 {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected lane flags %v", reply[9])
	}
	if flags&laneConfirmed != 0 {
		if flags != laneConfirmed || req.Confirm == "" {
			return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected lane flags %d", flags)
		}
		return contract.Reservation{Allowed: true, Confirmed: true, Key: key, Cost: int32(req.Cost)}, nil
	}
	res, err := r.parseReserve(key, req, reply[:9])
	if err != nil {
		return res, err
	}
	if !res.Allowed && flags != 0 {
		return contract.Reservation{}, fmt.Errorf("store: redis reserve: unexpected lane flags %d on a refusal", flags)
	}
	res.Took = flags&laneTook != 0
	if flags&laneYielded != 0 {
		res.Yielded = contract.LaneMember(token, req.Lane, req.Cost, res.Entry)
	}
	return res, nil
}

// The flags of the lanes' reply (lanes.lua).
const (
	laneYielded   = 1
	laneTook      = 2
	laneConfirmed = 4
)

// cancelLanesCall is the cancel of a yielding reservation: nothing is
// removed when a higher lane took its slot.
func (r *Redis) cancelLanesCall(res contract.Reservation) scriptCall {
	idx, bumped := r.laneKeys(res.Key)
	return scriptCall{cancelLanesScript, []string{r.logKey(res.Key), r.seenKey(res.Key), idx, bumped},
		[]any{strconv.FormatInt(res.Entry, 10), res.Cost, res.Yielded}}
}
