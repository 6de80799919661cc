package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// This file lets the overrides a process polls once a second ride in the
// round trip of its next reservation (contract.OverridesRider): their GETs
// go in one pipeline with the reservation's script call (runReserve, which
// every reservation goes through but one that waits for replicas), which a
// Cluster client splits by node.

// rides are the reads waiting for the next reservation.
type rides struct {
	waiting atomic.Bool // q is not empty: the common path reads only this
	mu      sync.Mutex
	q       []ride
}

// ride is one wait for the overrides of rules.
type ride struct {
	rules []string
	done  func(map[string][]byte, error)
}

// RideOverrides implements contract.OverridesRider: the store can when
// its client has pipelines and its reservations are not each followed by a
// WAIT (WithReplicaAck).
func (r *Redis) RideOverrides(rules []string, done func(map[string][]byte, error)) bool {
	if r.pipes == nil || r.ackReplicas > 0 || len(rules) == 0 {
		return false
	}
	r.rides.mu.Lock()
	r.rides.q = append(r.rides.q, ride{rules: rules, done: done})
	r.rides.waiting.Store(true)
	r.rides.mu.Unlock()
	return true
}

// takeRides returns the rides waiting, and leaves none.
func (r *Redis) takeRides() []ride {
	if !r.rides.waiting.Load() {
		return nil
	}
	r.rides.mu.Lock()
	defer r.rides.mu.Unlock()
	q := r.rides.q
	r.rides.q = nil
	r.rides.waiting.Store(false)
	return q
}

// aboard takes the rides waiting, adds their reads to pipe, and returns
// what delivers their results once pipe ran (on a goroutine of its own, so
// that no reservation waits for what the rides do with them); nil when
// none waits.
func (r *Redis) aboard(ctx context.Context, pipe redis.Pipeliner) (deliver func()) {
	q := r.takeRides()
	if q == nil {
		return nil
	}
	gets := make([][]*redis.StringCmd, len(q))
	for i, rd := range q {
		for _, name := range rd.rules {
			gets[i] = append(gets[i], pipe.Get(ctx, r.overrideKey(name)))
		}
	}
	return func() {
		go func() {
			for i, rd := range q {
				rd.done(overridesOf(rd.rules, gets[i]))
			}
		}()
	}
}

// overridesOf reads the replies of the GETs of rules.
func overridesOf(rules []string, gets []*redis.StringCmd) (map[string][]byte, error) {
	out := map[string][]byte{}
	for i, cmd := range gets {
		b, err := cmd.Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return nil, fmt.Errorf("store: redis overrides: %w", err)
		}
		out[rules[i]] = b
	}
	return out, nil
}

// evalRiding sends calls as evalSHA does, each send one pipeline on p, and
// takes along the reads of the rides waiting, then delivers their results.
func (r *Redis) evalRiding(ctx context.Context, p pipeliner, calls []scriptCall) []*redis.Cmd {
	var deliver func()
	cmds := evalSHA(ctx, calls, func(cmds []*redis.Cmd) {
		pipe := p.Pipeline()
		for _, c := range cmds {
			_ = pipe.Process(ctx, c)
		}
		if deliver == nil {
			deliver = r.aboard(ctx, pipe)
		}
		_, _ = pipe.Exec(ctx) // errors are per command
	})
	if deliver != nil {
		deliver()
	}
	return cmds
}
