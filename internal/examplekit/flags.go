package examplekit

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/engine"
)

// Flags are the command-line flags of a load test of a throttled client
// that do not depend on its upstream: which Redis the processes share, how
// many workers run for how long, how the throttle waits, and the transit
// delay of an in-process Upstream. Register them, parse the flag set, then
// Check them.
type Flags struct {
	// Redis is -redis: one address, or several comma-separated for a
	// Cluster; empty for an embedded Redis (see StartRedis and RedisAddrs).
	Redis string
	// Workers is -workers: concurrent workers in the process.
	Workers int
	// Duration is -duration: how long the load runs.
	Duration time.Duration
	// Mode is -mode: "wait" to wait for a free slot, "fail" to fail fast.
	Mode string
	// Margin is -margin: the safety margin added to the window (0: none).
	Margin time.Duration
	// MaxWait is -maxwait: in wait mode, the longest wait for a slot.
	MaxWait time.Duration
	// Transit is -transit: the in-process Upstream's Config.Transit.
	Transit time.Duration

	fs *flag.FlagSet
}

// Register defines the flags on fs, with their defaults.
func (f *Flags) Register(fs *flag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.Redis, "redis", "", "Redis address or URL (redis://, rediss://, redis-sentinel://, redis-cluster://), or several comma-separated addresses for a Cluster (empty: embedded Redis)")
	fs.IntVar(&f.Workers, "workers", 8, "concurrent workers in this process")
	fs.DurationVar(&f.Duration, "duration", 10*time.Second, "how long to run")
	fs.StringVar(&f.Mode, "mode", "wait", "wait: wait for a free slot; fail: fail fast when none is free")
	fs.DurationVar(&f.Margin, "margin", engine.DefaultMargin, "safety margin added to the window (0: none)")
	fs.DurationVar(&f.Transit, "transit", 0, "in-process upstream only: max random transit delay per request")
	fs.DurationVar(&f.MaxWait, "maxwait", time.Minute, "wait mode: longest wait for a slot")
}

// Check validates the parsed flags. inProcess says whether the load runs
// against an in-process Upstream, the only one -transit applies to.
func (f *Flags) Check(inProcess bool) error {
	maxWaitSet := false
	if f.fs != nil {
		f.fs.Visit(func(fl *flag.Flag) { maxWaitSet = maxWaitSet || fl.Name == "maxwait" })
	}
	switch {
	case f.Workers < 1:
		return fmt.Errorf("-workers must be at least 1, not %d", f.Workers)
	case f.Duration <= 0:
		return fmt.Errorf("-duration must be positive, not %s", f.Duration)
	case f.Mode != "wait" && f.Mode != "fail":
		return fmt.Errorf("-mode must be wait or fail, not %q", f.Mode)
	case f.Margin < 0:
		return fmt.Errorf("-margin must not be negative, not %s", f.Margin)
	case f.Transit < 0:
		return fmt.Errorf("-transit must not be negative, not %s", f.Transit)
	case f.Transit > 0 && !inProcess:
		return errors.New("-transit applies to the in-process upstream only")
	case f.Mode == "fail" && maxWaitSet:
		return errors.New("-maxwait applies to -mode wait only")
	case f.MaxWait <= 0:
		return fmt.Errorf("-maxwait must be positive (use -mode fail to never wait), not %s", f.MaxWait)
	}
	return nil
}

// RedisAddrs returns the addresses in -redis, for StartRedis.
func (f *Flags) RedisAddrs() []string {
	return strings.Fields(strings.ReplaceAll(f.Redis, ",", " "))
}

// Apply sets the FailFast, MaxWait and Margin of r from the flags.
func (f *Flags) Apply(r *throttle.Rule) {
	r.Margin = f.Margin
	if f.Margin == 0 {
		r.Margin = throttle.NoMargin // Margin 0 in a Rule means the default
	}
	if f.Mode == "fail" {
		r.FailFast = true
	} else {
		r.MaxWait = f.MaxWait
	}
}
