package throttletest

import (
	"errors"
	"net/http"
	"time"
)

// This file is Config.Also: more limits on other keys that every request
// must pass too, as an API that limits each token and the whole app.

// newTiers builds the upstreams of cfg.Also (NewUpstream has checked cfg).
func newTiers(cfg Config) ([]*Upstream, error) {
	if len(cfg.Also) == 0 {
		return nil, nil
	}
	if cfg.Algorithm != SlidingLog {
		return nil, errors.New("throttletest: Also needs the SlidingLog algorithm")
	}
	tiers := make([]*Upstream, len(cfg.Also))
	for i, c := range cfg.Also {
		if c.Algorithm != SlidingLog || c.Burst != 0 || c.Transit != 0 || c.IETF || c.XRateLimit || c.Now != nil || len(c.Also) > 0 {
			return nil, errors.New("throttletest: an Also config takes only N, Window and Key")
		}
		c.Now = cfg.Now
		up, err := NewUpstream(c)
		if err != nil {
			return nil, err
		}
		tiers[i] = up
	}
	return tiers, nil
}

// Also returns the upstream that counts Config.Also[i], for its Stats and
// assertions (its rejections are the requests it refused).
func (u *Upstream) Also(i int) *Upstream { return u.also[i] }

// arriveTiers is arrive with Config.Also: the arrival is accepted only if
// the request's key and every tier's key have room, and is then counted in
// all of them; refused, it counts in none, and is listed as rejected under
// the request's key and under the key of every tier that had no room.
func (u *Upstream) arriveTiers(key string, r *http.Request) (now time.Time, ok bool, retry time.Duration, remaining int, reset time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, t := range u.also {
		t.mu.Lock()
		defer t.mu.Unlock()
	}
	now = u.cfg.Now()
	states := []*keyState{u.state(key)}
	for _, t := range u.also {
		states = append(states, t.state(t.cfg.Key(r)))
	}
	ok, retry, remaining, reset = u.room(states[0], now)
	refused := make([]bool, len(states))
	refused[0] = !ok
	for i, t := range u.also {
		tok, tretry, _, _ := t.room(states[i+1], now)
		refused[i+1] = !tok
		if !tok {
			ok, retry = false, max(retry, tretry)
		}
	}
	for i, ks := range states {
		switch {
		case ok:
			ks.window = append(ks.window, now)
			ks.arrivals = append(ks.arrivals, now)
		case i == 0 || refused[i]:
			ks.rejected = append(ks.rejected, now)
		}
	}
	if ok {
		remaining--
	}
	return now, ok, retry, remaining, reset
}

// state returns the state of key, made if new; u.mu is held.
func (u *Upstream) state(key string) *keyState {
	ks := u.keys[key]
	if ks == nil {
		ks = &keyState{}
		u.keys[key] = ks
	}
	return ks
}

// room is sliding without the record: whether ks has room now, and if not
// how long until it would.
func (u *Upstream) room(ks *keyState, now time.Time) (ok bool, retry time.Duration, remaining int, reset time.Duration) {
	drop := 0
	for drop < len(ks.window) && !ks.window[drop].After(now.Add(-u.cfg.Window)) {
		drop++
	}
	ks.window = ks.window[drop:]
	if len(ks.window) > 0 {
		reset = ks.window[0].Add(u.cfg.Window).Sub(now)
	}
	if len(ks.window) >= u.cfg.N {
		return false, ks.window[len(ks.window)-u.cfg.N].Add(u.cfg.Window).Sub(now), 0, reset
	}
	return true, 0, u.cfg.N - len(ks.window), reset
}
