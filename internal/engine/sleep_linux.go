package engine

import (
	"syscall"
	"time"
)

// preciseTimers: Linux timers wake up to a millisecond late (sleep.go).
const preciseTimers = false

// nanosleep sleeps d on the calling thread; a signal may cut it short.
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
