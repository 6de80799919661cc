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

// arriveTiers is arrive with Config.Also: the arrival at at (zero: now) is
// accepted only if the request's key and every tier's key have room, and is
// then counted in all of them; refused, it counts in none, and is listed as
// rejected under the request's key and under the key of every tier that had
// no room.
func (u *Upstream) arriveTiers(key string, r *http.Request, at time.Time) (now time.Time, ok bool, retry time.Duration, remaining int, reset time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, t := range u.also {
		t.mu.Lock()
		defer t.mu.Unlock()
	}
	now = at
	if now.IsZero() {
		now = u.cfg.Now()
	}
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
			ks.record(now)
		case i == 0 || refused[i]:
			ks.rejected = insertTime(ks.rejected, now)
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

// room is the sliding log without the record: whether ks has room for an
// arrival at now, and if not how long until it would; how many the window
// (now-W, now] admits besides those in it, and when its oldest leaves it.
// There is room when no window of length W holds more than N accepted
// arrivals with this one: those before it, and, for an arrival decided
// after later ones (NewServer), those after it.
func (u *Upstream) room(ks *keyState, now time.Time) (ok bool, retry time.Duration, remaining int, reset time.Duration) {
	n, w, a := u.cfg.N, u.cfg.Window, ks.arrivals
	i := after(a, now)
	in := i - after(a, now.Add(-w)) // in (now-W, now]
	if in > 0 {
		reset = a[i-in].Add(w).Sub(now)
	}
	// With now at index i, the arrivals j and j+n (j from i-n to i) are n
	// apart: they must lie W apart or more.
	at := func(j int) time.Time {
		switch {
		case j < i:
			return a[j]
		case j == i:
			return now
		default:
			return a[j-1]
		}
	}
	for j := max(i-n, 0); j <= i && j+n <= len(a); j++ {
		if gap := at(j + n).Sub(at(j)); gap < w {
			retry = max(retry, w-gap)
		}
	}
	if retry > 0 {
		return false, retry, 0, reset
	}
	return true, 0, n - in, reset
}
