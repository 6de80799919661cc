//go:build !linux

package throttle

import "time"

// preciseTimers: elsewhere the runtime's timers wait with a timeout in
// nanoseconds (kqueue; high-resolution timers on Windows), so sleep needs
// no last stretch of its own.
const preciseTimers = true

func nanosleep(d time.Duration) { time.Sleep(d) }
