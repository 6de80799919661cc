package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/script"
)

// luaScript is one assembled script: go-redis's Script for a plain call
// (EVALSHA, then EVAL on NOSCRIPT), and its source for the calls that fall
// back by hand (see evalSHA).
type luaScript struct {
	*redis.Script
	src string
}

func newScript(src string) luaScript { return luaScript{redis.NewScript(src), src} }

var (
	// reserveScripts is the reserve script of each algorithm.
	reserveScripts = [...]luaScript{
		contract.SlidingLog:     newScript(script.Reserve(contract.SlidingLog.String())),
		contract.FixedWindow:    newScript(script.Reserve(contract.FixedWindow.String())),
		contract.SlidingCounter: newScript(script.Reserve(contract.SlidingCounter.String())),
		contract.Buckets:        newScript(script.Reserve(contract.Buckets.String())),
	}
	// pacedScript is the log's reserve script for a request with a paced limit.
	pacedScript        = newScript(script.Reserve("paced"))
	cancelScript       = newScript(script.Cancel())
	cancelPacedScript  = newScript(script.CancelPaced())
	cancelCountsScript = newScript(script.CancelCounts())
	feedbackScript     = newScript(script.Feedback())
	repairScript       = newScript(script.Repair())
)

// scriptCall is one call of a script, to send as EVALSHA or EVAL.
type scriptCall struct {
	script luaScript
	keys   []string
	args   []any
}

// cmd returns the command of c, EVAL (the source) when eval is set, EVALSHA
// (the hash) otherwise.
func (c scriptCall) cmd(ctx context.Context, eval bool) *redis.Cmd {
	a := make([]any, 0, 3+len(c.keys)+len(c.args))
	if eval {
		a = append(a, "eval", c.script.src)
	} else {
		a = append(a, "evalsha", c.script.Hash())
	}
	a = append(a, len(c.keys))
	for _, k := range c.keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, c.args...)...)
	if len(c.keys) > 0 {
		cmd.SetFirstKeyPos(3) // as go-redis's own EvalSha: a Cluster routes by it
	}
	return cmd
}

// evalSHA sends calls as EVALSHA through send, then sends again as EVAL, in
// one more send, the calls whose script the server's cache lacked (NOSCRIPT:
// nothing ran). It returns the commands that answered, one per call: their
// errors and replies are per call. send sends its commands as it must (one
// by one, in a pipeline, followed by WAIT) and reports failures through them.
func evalSHA(ctx context.Context, calls []scriptCall, send func([]*redis.Cmd)) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.cmd(ctx, false)
	}
	send(cmds)
	var again []*redis.Cmd
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			cmds[i] = calls[i].cmd(ctx, true)
			again = append(again, cmds[i])
		}
	}
	if len(again) > 0 {
		send(again)
	}
	return cmds
}

// processor is what go-redis clients (Client, ClusterClient, Ring) have to
// run a command they are given.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceCmd is a script call that go-redis must not send again after it may
// have reached the server: its client retries a command after a read
// timeout or a broken connection by default, and a Cancel run twice removes
// the entries of another reservation at the same entry (see Redis.Cancel). A
// command that surely never left the client is still retried.
type onceCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (onceCmd) NoRetry() bool { return true }

// runOnce runs one script call, each command sent at most once.
func runOnce(ctx context.Context, p processor, c scriptCall) error {
	return evalSHA(ctx, []scriptCall{c}, func(cmds []*redis.Cmd) {
		for _, cmd := range cmds {
			_ = p.Process(ctx, onceCmd{cmd})
		}
	})[0].Err()
}
