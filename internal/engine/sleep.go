package engine

import (
	"context"
	"runtime"
	"time"
)

// Go's timers on Linux wake up to about a millisecond late: the runtime
// waits for them in epoll_wait, whose timeout is in whole milliseconds
// (golang/go#44343, #53824). A waiter that wakes anywhere in that
// millisecond is a millisecond of every slot's lateness, which the
// allowance must cover and which a pace without a burst pays on every slot
// (a tenth of the rate at 100 per second). So sleep wakes by a timer a
// little before the slot (wakeLead) and sleeps the rest on a thread of its
// own (nanosleep, which the kernel's high-resolution timers end within tens
// of microseconds). At most finishers such sleeps run at once, fewer than
// GOMAXPROCS, since each holds its thread and, for a while, its P; the
// others, or with one P, the timer takes the whole wait. (On a fake clock,
// testing/synctest's, a nanosleep moves nothing: the timer sleeps the rest.)

// wakeLead is how long before its end a wait leaves the timer: more than a
// timer's late wake-up, so that the last stretch is slept precisely.
const wakeLead = 2 * time.Millisecond

// finishers bounds the precise sleeps running at once.
var finishers = make(chan struct{}, max(runtime.GOMAXPROCS(0)-1, 0))

// PreciseSleep blocks for d, or until ctx ends, whichever is first, and returns
// ctx.Err() in the second case. It does not return before d has passed
// unless ctx ended. (x/time/rate's wait takes a timer factory for its tests;
// testing/synctest's fake clock makes one unnecessary here.)
func PreciseSleep(ctx context.Context, d time.Duration) error {
	if d <= 0 || preciseTimers || cap(finishers) == 0 {
		return TimerSleep(ctx, d)
	}
	end := time.Now().Add(d)
	if err := TimerSleep(ctx, d-wakeLead); err != nil {
		return err
	}
	if left := time.Until(end); left > 0 && finish(left) {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	// No finisher was free, or a signal cut the nanosleep short.
	return TimerSleep(ctx, time.Until(end))
}

// TimerSleep is PreciseSleep by the runtime's timer alone.
func TimerSleep(ctx context.Context, d time.Duration) error {
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

// finish sleeps d on this goroutine's thread, if a finisher is free, and
// reports whether it did.
func finish(d time.Duration) bool {
	select {
	case finishers <- struct{}{}:
	default:
		return false
	}
	defer func() { <-finishers }()
	nanosleep(d)
	return true
}
