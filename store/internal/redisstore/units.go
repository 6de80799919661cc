package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/script"
)

// This file is what the units of a request (contract.Part.Unit) add to the
// Redis store: the cancel of a reservation with units and Settle, one
// script call each (internal/script/units.lua, settle.lua).

var (
	cancelUnitsScript = newScript(script.CancelUnits())
	settleScript      = newScript(script.Settle())
)

func init() {
	alsoScripts["cancel units"] = cancelUnitsScript
	alsoScripts["settle"] = settleScript
}

// unitKeys appends the keys of units, of res, to keys: each unit's log
// (under res.Key or its own Key), its sum, then its pace key when paced.
func (r *Redis) unitKeys(keys []string, res contract.Reservation, units []contract.Unit) []string {
	for _, u := range units {
		key := res.Key
		if u.Key != "" {
			key = u.Key
		}
		k := r.unitKey(key, u.Name)
		keys = append(keys, k, k+":sum")
		if u.Spacing > 0 {
			keys = append(keys, k+":pace")
		}
	}
	return keys
}

// now is the clock argument of a script: "" for the server's TIME.
func (r *Redis) nowArg() string {
	if r.clock != nil {
		return strconv.FormatInt(r.clock().UnixMicro(), 10)
	}
	return ""
}

// cancelUnitsCall is the cancel of a reservation with units: its units
// settled to 0, its entries removed from its other keys' logs and its
// own, its paced time given back (script.CancelUnits).
func (r *Redis) cancelUnitsCall(res contract.Reservation) scriptCall {
	keys := []string{r.logKey(res.Key), r.paceKey(res.Key)}
	for _, k := range res.AlsoKeys {
		keys = append(keys, r.logKey(k))
	}
	keys = append(r.unitKeys(keys, res, res.Units), r.seenKey(res.Key)) // the seen mark last (cancel.lua)
	args := []any{strconv.FormatInt(res.Entry, 10), res.Cost, strconv.FormatInt(res.TAT, 10),
		int64(res.Cost) * res.Spacing, len(res.AlsoKeys), r.nowArg()}
	for _, u := range res.Units {
		args = append(args, u.Cost, 0, u.Spacing)
	}
	return scriptCall{cancelUnitsScript, keys, args}
}

// Settle implements contract.Settler: one script call per Cluster slot of
// its units (one on a single server), each sent at most once (a
// settlement run twice would find no entry of the estimate the second
// time, but would move a paced time twice).
func (r *Redis) Settle(ctx context.Context, res contract.Reservation, actual []int64) error {
	if err := contract.ValidSettle(res, actual); err != nil {
		return err
	}
	// The units by slot and entry, in order: a unit under another key of
	// the request lies in that key's slot and was recorded at its entry.
	type group struct {
		slot  string
		entry int64
	}
	var order []group
	of := map[group][]int{}
	for i, u := range res.Units {
		key := res.Key
		if u.Key != "" {
			key = u.Key
		}
		g := group{r.slotOf(r.logKey(key)), res.UnitEntry(u)}
		if _, ok := of[g]; !ok {
			order = append(order, g)
		}
		of[g] = append(of[g], i)
	}
	var errs []error
	for _, g := range order {
		units := make([]contract.Unit, len(of[g]))
		args := []any{r.nowArg(), strconv.FormatInt(g.entry, 10)}
		for k, i := range of[g] {
			u := res.Units[i]
			units[k] = u
			args = append(args, u.Cost, actual[i], u.Spacing)
		}
		errs = append(errs, r.settleCall(ctx, scriptCall{settleScript, r.unitKeys(nil, res, units), args}))
	}
	return errors.Join(errs...)
}

// settleCall runs one settle call, sent at most once.
func (r *Redis) settleCall(ctx context.Context, call scriptCall) error {
	wctx, w := r.refusals.watch(ctx)
	var err error
	if p, ok := r.client.(processor); ok {
		err = runOnce(wctx, p, call)
	} else {
		err = call.script.Run(wctx, r.client, call.keys, call.args...).Err()
	}
	if refused := w.end(ctx, err != nil); refused != nil {
		return fmt.Errorf("store: redis settle: %w", refused)
	}
	if err != nil {
		r.failed(err)
		return fmt.Errorf("store: redis settle: %w", err)
	}
	return nil
}
