package memstore

import (
	"math"
	"slices"

	"github.com/throttle-go/throttle/internal/contract"
)

// The counting algorithms (FixedWindow, SlidingCounter, Buckets) keep, per
// limit, the units admitted in each aligned window or bucket: index k covers
// [k·L, (k+1)·L) µs, with L the limit's window (Per) or its Precision. This
// file is their arithmetic, the reference that the scripts of
// internal/script (counting.lua, fixed.lua, counter.lua, counts.lua and
// buckets.lua) follow step for step, so that the
// Memory store and the Redis store give the same answers.
//
// Like the log, a counter reserves the future: Reserve finds the earliest
// time t >= now at which every limit admits the cost, and adds the cost to
// the counters of t. A unit counted in a window or bucket counts there
// whatever its time inside it, so reservations made in any order keep every
// counter's own bound (at most N per window for FixedWindow, an estimate of
// at most N at every admission for SlidingCounter, at most N per span of
// buckets for Buckets). The search walks forward through the windows that
// hold units, so it ends; maxSteps bounds it all the same.

// maxSteps bounds the search of one Reserve. A search that would need more
// (no realistic key does) is refused.
const maxSteps = 100_000

// counts is the units of one limit per window or bucket index.
type counts map[int64]int64

// window is the length of l's window as the scripts see it: Per, or P·B
// for Buckets.
func window(alg contract.Algorithm, l contract.Limit) int64 {
	if alg == contract.Buckets {
		return l.BucketLen() * l.Buckets()
	}
	return contract.Micros(l.Per)
}

// floorDiv is t / l rounded down, for t >= 0 and l > 0.
func floorDiv(t, l int64) int64 { return t / l }

// oldestNeeded is the smallest index a search from now can read: older
// windows and buckets are dropped.
func oldestNeeded(alg contract.Algorithm, l contract.Limit, now int64) int64 {
	k := floorDiv(now, contract.Span(alg, l))
	switch alg {
	case contract.SlidingCounter:
		return k - 1
	case contract.Buckets:
		return k - l.Buckets() + 1
	}
	return k
}

// countsUntil is the end, in microseconds, of the last window in which the
// units of index k still count.
func countsUntil(alg contract.Algorithm, l contract.Limit, k int64) int64 {
	s := contract.Span(alg, l)
	switch alg {
	case contract.SlidingCounter:
		return (k + 2) * s
	case contract.Buckets:
		return (k + l.Buckets()) * s
	}
	return (k + 1) * s
}

// earliest returns the earliest time t >= now at which every limit admits
// cost more units, the index of the limit that last moved t (-1 when none
// did), and whether the search ran out of steps before it was sure.
func earliest(alg contract.Algorithm, limits []contract.Limit, c []counts, now, cost int64) (t int64, limit int, capped bool) {
	t, limit = now, -1
	steps := maxSteps
	for {
		moved := false
		for i, l := range limits {
			var ti int64
			switch alg {
			case contract.FixedWindow:
				ti = fixedFrom(c[i], int64(l.N), contract.Micros(l.Per), cost, t, &steps)
			case contract.SlidingCounter:
				ti = counterFrom(c[i], int64(l.N), contract.Micros(l.Per), cost, t, &steps)
			default:
				ti = bucketsFrom(c[i], int64(l.N), l.BucketLen(), l.Buckets(), cost, t, &steps)
			}
			if ti > t {
				t, limit, moved = ti, i, true
			}
		}
		if steps <= 0 {
			return t, limit, true
		}
		if !moved {
			return t, limit, false
		}
	}
}

// fixedFrom is the earliest time >= t at which the window of the time holds
// room for cost.
func fixedFrom(c counts, n, w, cost, t int64, steps *int) int64 {
	for *steps > 0 {
		*steps--
		k := floorDiv(t, w)
		if c[k]+cost <= n {
			return t
		}
		t = (k + 1) * w
	}
	return t
}

// counterFrom is the earliest time >= t at which the estimate of the sliding
// window, prev·(1 - elapsed/w) + cur, leaves room for cost, and adding cost
// to the current window keeps the estimate at the start of the next one,
// cur + next, within n (later in the next window it only falls).
func counterFrom(c counts, n, w, cost, t int64, steps *int) int64 {
	for *steps > 0 {
		*steps--
		j := floorDiv(t, w)
		prev, cur, next := c[j-1], c[j], c[j+1]
		room := n - cost - cur
		if room >= 0 && cur+cost+next <= n {
			if prev <= room {
				return t
			}
			// prev·(1 - (s - j·w)/w) <= room  <=>  s >= j·w + w·(prev-room)/prev.
			// The same float64 steps as counter.lua, so both round alike.
			need := j*w + int64(math.Ceil(float64(w)*float64(prev-room)/float64(prev)))
			if need < (j+1)*w {
				return max(t, need)
			}
		}
		t = (j + 1) * w
	}
	return t
}

// bucketsFrom is the earliest time >= t at which a unit in the time's bucket
// p keeps every span of b buckets that contains p within n: the spans ending
// at p, p+1, ..., p+b-1 (only up to the last bucket holding units; later
// spans only lose units).
func bucketsFrom(c counts, n, p, b, cost, t int64, steps *int) int64 {
	start := floorDiv(t, p)
	hi, sum := start, int64(0)
	for k, v := range c {
		hi = max(hi, k)
		if k > start-b && k <= start {
			sum += v
		}
	}
	// cand is the candidate bucket; q scans the spans ending at q, sum
	// being the units of (q-b, q]. A span over the limit rules out every
	// candidate up to q (each would add to it), so the next is q+1.
	cand, q := start, start
	for *steps > 0 {
		*steps--
		if sum+cost > n {
			cand = q + 1
		} else if q >= min(cand+b-1, max(cand, hi)) {
			break
		}
		q++
		sum += c[q] - c[q-b]
	}
	return max(t, cand*p)
}

// counterState is the state of one key under a counting algorithm.
type counterState struct {
	c       []counts
	expires int64 // like PEXPIRE: gone at or after this time
}

// reserveCounts is Reserve for the counting algorithms, on st (which it
// updates) with the key's feedback f (nil: none), as the counting scripts
// do; the Memory store calls it under its lock.
//
// The feedback works as for the log (memFeedback.hold): a pause, or a budget
// too short for the cost, holds the search back to its end (refused at once
// past the server wait), and a slot before a budget's reset spends it (Cancel
// gives nothing back to a budget, as for the log). A learned limit of n per w, which has no
// counters of its own, tightens each limit to the same rate: N becomes
// floor(n·W/w) where that is lower (and at least the cost).
func reserveCounts(st *counterState, key string, req contract.Request, now int64, f *memFeedback) contract.Reservation {
	cost := int64(req.Cost)
	limits := slices.Clone(req.Limits)
	res := contract.Reservation{Key: key, Cost: int32(req.Cost)}
	start, cause, budgetReset := now, contract.CauseNone, int64(0)
	var tightened []bool // by a learned limit
	if f != nil {
		h := f.hold(now, cost, contract.MicrosDown(req.ServerWait()))
		if h.refuse {
			res.Cause, res.RetryAfter = contract.CauseUpstream, contract.FromMicros(h.until-now)
			return res
		}
		if h.until > now {
			start, cause = h.until, contract.CauseUpstream
		}
		budgetReset = h.budgetReset
		maxW := int64(0)
		for _, l := range req.Limits {
			maxW = max(maxW, window(req.Algorithm, l))
		}
		if ln, lw, ok := f.learned(now, maxW, 0); ok {
			tightened = make([]bool, len(limits))
			for i, l := range limits {
				// The same float64 steps as the scripts, so both round alike.
				n := max(int(math.Floor(float64(ln)*float64(window(req.Algorithm, l))/float64(lw))), req.Cost)
				if n < l.N {
					limits[i].N, tightened[i] = n, true
				}
			}
		}
	}
	for len(st.c) < len(limits) {
		st.c = append(st.c, counts{})
	}
	// As the scripts drop the fields of limits a call does not have.
	st.c = st.c[:len(limits)]
	// Drop what no search from now reads: it changes memory, not answers.
	for i, l := range limits {
		old := oldestNeeded(req.Algorithm, l, now)
		for k := range st.c[i] {
			if k < old {
				delete(st.c[i], k)
			}
		}
	}
	t, limit, capped := earliest(req.Algorithm, limits, st.c, start, cost)
	switch {
	case limit >= 0 && tightened != nil && tightened[limit]:
		cause = contract.CauseLearned
	case limit >= 0:
		res.Limit, cause = limit, contract.CauseLimit
	}
	res.Cause = cause
	wait := t - now
	if capped || wait > contract.MicrosDown(req.MaxWait) {
		res.RetryAfter = contract.FromMicros(wait)
		return res
	}
	if budgetReset > 0 && t < budgetReset {
		f.budget -= cost
	}
	for i, l := range limits {
		k := floorDiv(t, contract.Span(req.Algorithm, l))
		st.c[i][k] += cost
		st.expires = max(st.expires, countsUntil(req.Algorithm, l, k))
	}
	res.Allowed, res.Delay, res.Slot, res.Entry = true, contract.FromMicros(wait), t, t
	res.Alg, res.Limits = req.Algorithm, req.Limits
	return res
}

// cancelCounts takes the units of res back from st.
func cancelCounts(st *counterState, res contract.Reservation) {
	for i, l := range res.Limits {
		if i >= len(st.c) {
			return
		}
		k := floorDiv(res.Slot, contract.Span(res.Alg, l))
		if v := st.c[i][k]; v <= int64(res.Cost) {
			delete(st.c[i], k)
		} else {
			st.c[i][k] = v - int64(res.Cost)
		}
	}
}
