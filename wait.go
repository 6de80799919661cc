package throttle

import (
	"context"
	"time"
)

// cancelTimeout bounds the Cancel sent after a waiter's context ended: it runs
// in the background on a context detached from the caller's, which is done.
const cancelTimeout = time.Second

// sleep blocks for d, or until ctx ends, whichever is first, and returns
// ctx.Err() in the second case.
//
// Tests drive it with testing/synctest's fake clock, so it needs no timer
// factory of its own (x/time/rate's wait takes one; synctest came later).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxWait is the longest a request may wait for its slot: the rule's MaxWait,
// cut to the time left before the context's deadline, so that a request fails
// now rather than sleeping and then missing the deadline anyway.
func maxWait(ctx context.Context, now time.Time, limit time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, dl.Sub(now))
	}
	return max(limit, 0)
}
