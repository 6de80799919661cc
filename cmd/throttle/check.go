package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

// checkRounds is how many PINGs and reservations the latency check times.
const checkRounds = 20

// report collects the lines of check and whether any failed.
type report struct {
	w      io.Writer
	sec    *secrets
	failed bool
}

func (r *report) ok(format string, a ...any)   { r.line("ok", format, a...) }
func (r *report) warn(format string, a ...any) { r.line("warn", format, a...) }
func (r *report) fail(format string, a ...any) {
	r.failed = true
	r.line("FAIL", format, a...)
}

func (r *report) line(level, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	for _, v := range r.sec.list {
		msg = strings.ReplaceAll(msg, v, "***")
	}
	fmt.Fprintf(r.w, "%-4s  %s\n", level, msg)
}

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("throttle check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c conn
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	rdb, _, sec, err := c.open()
	if err != nil {
		fmt.Fprintf(stderr, "throttle check: %v\n", err)
		return exitUsage
	}
	defer rdb.Close()
	r := &report{w: stdout, sec: sec}
	check(ctx, r, rdb, c.prefix, where(c.url))
	if r.failed {
		return exitFailed
	}
	return exitOK
}

// check runs every check on rdb, reporting to r.
func check(ctx context.Context, r *report, rdb redis.UniversalClient, prefix, addr string) {
	// TIME, not PING: a user made with an older store.ACLRule may lack
	// PING.
	if err := rdb.Time(ctx).Err(); err != nil && !strings.Contains(err.Error(), "NOPERM") {
		r.fail("connect to %s: %v", addr, err)
		return
	}
	checkVersion(ctx, r, rdb, addr)
	checkEviction(ctx, r, rdb, prefix)
	checkACL(ctx, r, rdb)
	checkScripts(ctx, r, rdb)
	checkLatency(ctx, r, rdb, prefix)
}

func checkVersion(ctx context.Context, r *report, rdb redis.UniversalClient, addr string) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		r.warn("version: INFO server: %v", err)
		return
	}
	v := infoField(info, "redis_version")
	if major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0]); major < 7 {
		r.warn("redis %s at %s: before 7.0 each new TTL costs the scripts an extra PTTL (no PEXPIRE GT)", v, addr)
		return
	}
	r.ok("redis %s at %s", v, addr)
}

// infoField returns the value of name in an INFO reply.
func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return "unknown"
}

// checkEviction asks the store itself, as a reservation on a scratch key
// would: its check reads maxmemory and maxmemory-policy (CONFIG GET, else INFO
// memory) and refuses a server that may evict throttle's keys. A refusal
// fails the check: the library would refuse every request.
func checkEviction(ctx context.Context, r *report, rdb redis.UniversalClient, prefix string) {
	st, err := redisAdmin(rdb, store.WithPrefix(prefix))
	if err != nil {
		r.fail("store: %v", err)
		return
	}
	key := fmt.Sprintf("throttle-check:%d", time.Now().UnixNano())
	defer func() { _, _ = st.Delete(context.WithoutCancel(ctx), key) }()
	_, err = st.Reserve(ctx, key, contract.Request{Limits: []contract.Limit{{N: 1_000_000, Per: time.Second}}, Cost: 1})
	switch {
	case errors.Is(err, store.ErrEvictingPolicy):
		// The library's own refusal: every reservation on this server
		// fails, so the check does too.
		r.fail("eviction: %v; every request through a store on this server fails with store.ErrEvictingPolicy (unless WithEvictionCheck says otherwise)", err)
	case err != nil:
		r.warn("eviction: not checked (%v)", err)
	default:
		r.ok("eviction: no maxmemory-policy that may evict throttle's keys")
	}
}

func checkACL(ctx context.Context, r *report, rdb redis.UniversalClient) {
	if who, err := rdb.Do(ctx, "acl", "whoami").Text(); err != nil {
		r.warn("ACL WHOAMI: %v", err)
	} else {
		r.ok("ACL user %s", who)
	}
	// TIME outside a script tells whether the user may run it at all;
	// the scripts read it unless store.WithClientTime.
	if err := rdb.Time(ctx).Err(); err != nil {
		r.fail("TIME: %v (the scripts read the server's clock; or use store.WithClientTime)", err)
	} else {
		r.ok("TIME allowed")
	}
}

func checkScripts(ctx context.Context, r *report, rdb redis.UniversalClient) {
	scripts := scriptsOf(rdb)
	names := make([]string, 0, len(scripts))
	for n := range scripts {
		names = append(names, n)
	}
	sort.Strings(names)
	// The same error for several scripts is said once, with their names.
	var errs []string
	failed := map[string][]string{}
	for _, n := range names {
		err := rdb.ScriptLoad(ctx, scripts[n]).Err()
		if err != nil && strings.Contains(err.Error(), "NOPERM") {
			// store.ACLRule does not grant SCRIPT: the store sends EVAL
			// when EVALSHA finds no script. The reservation below runs one.
			r.warn("SCRIPT LOAD not allowed for this user (the store loads its scripts with EVAL): not checked")
			return
		}
		if err != nil {
			if _, ok := failed[err.Error()]; !ok {
				errs = append(errs, err.Error())
			}
			failed[err.Error()] = append(failed[err.Error()], n)
		}
	}
	for _, e := range errs {
		who := strings.Join(failed[e], ", ")
		if len(failed[e]) == len(names) {
			who = fmt.Sprintf("all %d scripts", len(names))
		}
		r.fail("SCRIPT LOAD of %s: %s", who, e)
	}
	if len(errs) > 0 {
		return
	}
	r.ok("SCRIPT LOAD of the %d scripts", len(names))
}

// checkLatency times PING and one reservation (EVALSHA of the log's reserve
// script) on a scratch key, checkRounds times each, and deletes the key.
func checkLatency(ctx context.Context, r *report, rdb redis.UniversalClient, prefix string) {
	// The eviction check said its word above: here only the latency.
	st, err := redisAdmin(rdb, store.WithPrefix(prefix), store.WithEvictionCheck(store.EvictionOff))
	if err != nil {
		r.fail("store: %v", err)
		return
	}
	// PING, or TIME where the user may not PING (an older store.ACLRule).
	base, ping := "PING", func() error { return rdb.Ping(ctx).Err() }
	if err := ping(); err != nil && strings.Contains(err.Error(), "NOPERM") {
		base, ping = "TIME", func() error { return rdb.Time(ctx).Err() }
	}
	pings := make([]time.Duration, 0, checkRounds)
	for range checkRounds {
		start := time.Now()
		if err := ping(); err != nil {
			r.fail("%s: %v", base, err)
			return
		}
		pings = append(pings, time.Since(start))
	}
	key := fmt.Sprintf("throttle-check:%d", time.Now().UnixNano())
	req := contract.Request{Limits: []contract.Limit{{N: 1_000_000, Per: time.Second}}, Cost: 1}
	reserves := make([]time.Duration, 0, checkRounds)
	defer func() { _, _ = st.Delete(context.WithoutCancel(ctx), key) }()
	for range checkRounds {
		start := time.Now()
		res, err := st.Reserve(ctx, key, req)
		if err != nil {
			r.fail("a reservation (EVALSHA) on a scratch key: %v", err)
			return
		}
		if !res.Allowed {
			r.fail("a reservation on a scratch key was refused (%s)", res.Cause)
			return
		}
		reserves = append(reserves, time.Since(start))
	}
	p, s := median(pings), median(reserves)
	r.ok("latency, median of %d: %s %s, reservation %s (EVALSHA allowed)", checkRounds, base, human(p), human(s))
}

// where names the server of a URL for the report: its scheme and host, no
// userinfo.
func where(raw string) string {
	if raw == "" {
		raw = "redis://127.0.0.1:6379/0"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "the -redis URL"
	}
	if u.Scheme == "unix" {
		return u.Path
	}
	return u.Scheme + "://" + u.Host
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// scriptsOf returns the source of every script the Redis store on rdb runs,
// by name.
func scriptsOf(rdb redis.UniversalClient) map[string]string {
	adm, err := redisAdmin(rdb)
	if err != nil {
		return nil // only for a nil client
	}
	return adm.Scripts()
}

// redisAdmin returns the Redis store on rdb with its operator's side
// (contract.Admin).
func redisAdmin(rdb redis.UniversalClient, opts ...store.RedisOption) (contract.Admin, error) {
	st, err := store.NewRedis(rdb, opts...)
	if err != nil {
		return nil, err
	}
	adm, ok := st.(contract.Admin)
	if !ok {
		return nil, fmt.Errorf("unexpected store %T", st)
	}
	return adm, nil
}
