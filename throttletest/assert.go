package throttletest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// maxListed bounds how many arrivals a failure message lists.
const maxListed = 5

// RequireNoRejections fails the test at once (t.Fatalf) if the upstream has
// answered 429 to any request, listing the first rejected arrivals by key,
// as offsets from the first request the upstream saw.
func (u *Upstream) RequireNoRejections(t testing.TB) {
	t.Helper()
	if msg := u.rejections(); msg != "" {
		t.Fatal(msg)
	}
}

// rejections is the message of RequireNoRejections, "" when there were none.
func (u *Upstream) rejections() string {
	st := u.Stats()
	if st.Total.Rejected == 0 {
		return ""
	}
	start := u.start(st)
	type hit struct {
		key string
		at  time.Time
	}
	var hits []hit
	for k, ks := range st.Keys {
		for _, at := range ks.RejectedAt {
			hits = append(hits, hit{k, at})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "throttletest: the upstream (%d per %s) answered 429 to %d of %d requests; the first:",
		u.cfg.N, u.cfg.Window, st.Total.Rejected, st.Total.Rejected+st.Total.Accepted)
	for _, h := range hits[:min(len(hits), maxListed)] {
		fmt.Fprintf(&b, "\n  key %q at +%s", h.key, h.at.Sub(start))
	}
	if len(hits) > maxListed {
		fmt.Fprintf(&b, "\n  … and %d more", len(hits)-maxListed)
	}
	return b.String()
}

// AssertWithin reports an error (t.Errorf) and returns false if any key's
// accepted arrivals hold more than n in some window of length w, measured on
// arrival as the upstream measures: a check of a limit other than the
// upstream's own (a tighter share, a second tier). The message gives the
// fullest window of the worst key and its arrivals.
func (u *Upstream) AssertWithin(t testing.TB, n int, w time.Duration) bool {
	t.Helper()
	if msg := u.within(n, w); msg != "" {
		t.Error(msg)
		return false
	}
	return true
}

// within is the message of AssertWithin, "" when every key kept n per w.
func (u *Upstream) within(n int, w time.Duration) string {
	st := u.Stats()
	start := u.start(st)
	keys := make([]string, 0, len(st.Keys))
	for k := range st.Keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	worstKey, worstCount, worstAt := "", 0, 0
	var worst []time.Time
	for _, k := range keys {
		a := st.Keys[k].Arrivals
		// The fullest window (t - w, t] ends at an arrival: two pointers.
		lo := 0
		for hi := range a {
			for !a[lo].After(a[hi].Add(-w)) {
				lo++
			}
			if c := hi - lo + 1; c > worstCount {
				worstKey, worstCount, worstAt, worst = k, c, lo, a
			}
		}
	}
	if worstCount <= n {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "throttletest: key %q: %d requests arrived within %s, more than %d; they arrived at:", worstKey, worstCount, w, n)
	for _, at := range worst[worstAt : worstAt+min(worstCount, maxListed)] {
		fmt.Fprintf(&b, "\n  +%s", at.Sub(start))
	}
	if worstCount > maxListed {
		fmt.Fprintf(&b, "\n  … and %d more, the last at +%s", worstCount-maxListed, worst[worstAt+worstCount-1].Sub(start))
	}
	return b.String()
}

// start is the first time the upstream saw a request, accepted or not.
func (u *Upstream) start(st Stats) time.Time {
	start := st.Total.FirstAccepted
	if len(st.Total.RejectedAt) > 0 && (start.IsZero() || st.Total.RejectedAt[0].Before(start)) {
		start = st.Total.RejectedAt[0]
	}
	return start
}
