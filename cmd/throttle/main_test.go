package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]throttle.Limit{
		"100/1s":         throttle.PerSecond(100),
		"100/s":          throttle.PerSecond(100),
		"5000/1h":        throttle.PerHour(5000),
		"5000/h":         throttle.PerHour(5000),
		"10/500ms":       throttle.Per(10, 500*time.Millisecond),
		"1000/d":         throttle.PerDay(1000),
		"1000/2d":        throttle.Per(1000, 48*time.Hour),
		" 7/1m30s ":      throttle.Per(7, 90*time.Second),
		"5000/1h/1m":     {N: 5000, Per: time.Hour, Precision: time.Minute},
		"10/s/100ms":     {N: 10, Per: time.Second, Precision: 100 * time.Millisecond},
		"100/1s/paced":   throttle.Paced(100, time.Second, 0),
		"100/1s/paced+9": throttle.Paced(100, time.Second, 9),
	} {
		got, err := parseLimit(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
		back, err := parseLimit(formatLimit(got))
		require.NoError(t, err)
		assert.Equal(t, got, back, "formatLimit(%q) = %q", in, formatLimit(got))
	}
	for _, in := range []string{"", "100", "0/1s", "-1/1s", "x/1s", "10/", "10/0s", "10/xs", "10/0d", "10/1ns", "10/1s/x", "10/1s/0s", "10/1s/paced9", "10/1s/paced+", "10/1s/paced+-1"} {
		_, err := parseLimit(in)
		assert.Error(t, err, in)
	}
	assert.Equal(t, "5000/1h", formatLimit(throttle.PerHour(5000)))
	assert.Equal(t, "3/1m30s", formatLimit(throttle.Per(3, 90*time.Second)))
}

// The key the CLI derives from a token and a secret file is the one a
// Transport with that rule and secret stores a request under.
func TestKeyDerivationMatchesTransport(t *testing.T) {
	const token = "tok-SECRET-123"
	secret := []byte("0123456789abcdef0123456789abcdef")
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, append(secret, '\n'), 0o600))

	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	for _, c := range []struct {
		by   string
		fn   throttle.KeyFunc
		set  func(*http.Request)
		opts []throttle.Option
		args []string
	}{
		{"bearer", throttle.ByAuthorization(), func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) },
			[]throttle.Option{throttle.WithKeySecret(secret)}, []string{"-secret-file", secretFile}},
		{"query:access_token", throttle.ByQuery("access_token"), func(r *http.Request) { r.URL.RawQuery = "access_token=" + token }, nil, nil},
		{"header:X-Api-Key", throttle.ByHeader("x-api-key"), func(r *http.Request) { r.Header.Set("X-Api-Key", token) },
			[]throttle.Option{throttle.WithKeySecret(secret)}, []string{"-secret-file", secretFile}},
	} {
		t.Run(c.by, func(t *testing.T) {
			st, err := store.NewMemory()
			require.NoError(t, err)
			var seen string
			rule := throttle.Rule{Name: "api", Host: "127.0.0.1", Limits: []throttle.Limit{throttle.PerMinute(10)}, Key: c.fn}
			tr, err := throttle.New(nil, st, append(c.opts, throttle.WithRule(rule),
				throttle.WithOnDecision(func(d throttle.Decision) { seen = d.Key }))...)
			require.NoError(t, err)
			req, _ := http.NewRequest("GET", up.URL, nil)
			c.set(req)
			resp, err := (&http.Client{Transport: tr}).Do(req)
			require.NoError(t, err)
			resp.Body.Close()

			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			var k keyFlags
			k.register(fs)
			require.NoError(t, fs.Parse(append([]string{"-rule", "api", "-limit", "10/1m", "-token", token, "-by", c.by}, c.args...)))
			got, err := k.resolve(context.Background(), st, &secrets{})
			require.NoError(t, err)
			assert.Equal(t, "api:"+seen, got.skey)
			assert.Equal(t, "throttle:{api:"+seen+"}", got.redis)
			assert.NotContains(t, got.skey, token)
			// And the usage the CLI reads is the request's.
			u, err := operator.Usage(context.Background(), got.tr, "api", got.rateKey)
			require.NoError(t, err)
			assert.Equal(t, 1, u.Limits[0].Used+u.Limits[0].Reserved)
		})
	}
}

func TestWriteUsage(t *testing.T) {
	tg := &target{rule: "payments", rateKey: "pg1", skey: "payments:pg1", redis: "throttle:{payments:pg1}",
		limits: []throttle.Limit{throttle.PerSecond(100), throttle.PerHour(5000)}}
	u := operator.KeyUsage{
		Limits: []operator.LimitUsage{
			{Limit: throttle.Per(100, time.Second+5*time.Millisecond), Used: 97, Reserved: 3},
			{Limit: throttle.Per(5000, time.Hour+5*time.Millisecond), Used: 2345, Reserved: 3},
		},
		Next: 12345 * time.Microsecond, NextCause: operator.CauseLimit, Entries: 2348, Last: 11 * time.Millisecond,
		Pause: 1500 * time.Millisecond, Learned: throttle.PerSecond(50), LearnedFor: 59 * time.Second, Budget: 40, BudgetReset: 20 * time.Second,
	}
	var b bytes.Buffer
	writeUsage(&b, tg, u)
	assert.Equal(t, `rule payments, key pg1, algorithm log
redis key throttle:{payments:pg1}
    limit      window       used  reserved
   100/1s      1.005s     97/100         3
  5000/1h  1h0m0.005s  2345/5000         3
next free slot: in 12.3ms (limit 100/1s)
queue: the newest reservation is 11ms ahead
pause: 1.5s left
learned limit: 50/1s for 59s
budget: 40 left until the reset in 20s
`, b.String())
	line := watchLine(time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), tg, u)
	assert.Equal(t, "03:04:05.006  100/1s 97/100 +3  5000/1h 2345/5000 +3  next 12.3ms  pause 1.5s left", line)
	assert.Equal(t, "03:04:05.006  100/1s 0/100  next now  pause none",
		watchLine(time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), tg, operator.KeyUsage{Limits: []operator.LimitUsage{{Limit: throttle.PerSecond(100)}}}))

	// The default pace after the rule's limits, and a learned pace.
	tg.limits = tg.limits[:1]
	pace := throttle.Paced(100, time.Second+5*time.Millisecond, 9)
	u = operator.KeyUsage{
		Limits: []operator.LimitUsage{{Limit: throttle.Per(100, time.Second+5*time.Millisecond), Used: 40}, {Limit: pace, Used: 10, Reserved: 2}},
		Next:   20 * time.Millisecond, NextCause: operator.CauseLimit, NextLimit: 1,
		LearnedPace: throttle.Paced(1, 20*time.Millisecond, 0), LearnedPaceFor: time.Minute,
	}
	b.Reset()
	writeUsage(&b, tg, u)
	assert.Contains(t, b.String(), "  default 100/1.005s/paced+9  1.005s   10/10         2\n")
	assert.Contains(t, b.String(), "next free slot: in 20ms (the default pace)\n")
	assert.Contains(t, b.String(), "learned pace: one per 20ms, 0 more at once, for 1m; 99% slower than the rule's rate; last set or slowed 0s ago, not sped up since\n")
	assert.Equal(t, "03:04:05.006  100/1s 40/100  default 100/1.005s/paced+9 10/10 +2  next 20ms  pause none  learned pace 1/20ms (99% slower)",
		watchLine(time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC), tg, u))
}

// TestWriteUsageLearned: the learned margin, and the learned pace against
// the rule's own and what last changed it, in usage and watch.
func TestWriteUsageLearned(t *testing.T) {
	tg := &target{rule: "payments", rateKey: "pg1", skey: "payments:pg1", redis: "throttle:{payments:pg1}",
		limits: []throttle.Limit{throttle.PerSecond(100)}}
	ms := time.Millisecond
	u := operator.KeyUsage{
		Limits:      []operator.LimitUsage{{Limit: throttle.Per(100, time.Second)}, {Limit: throttle.Paced(100, time.Second, 9)}},
		LearnedPace: throttle.Paced(1, 10400*time.Microsecond, 0), LearnedPaceFor: 9 * time.Minute, LearnedPaceChanged: 3 * time.Second,
		LearnedMargin: 20 * ms, LearnedMarginFor: 10 * time.Minute, LearnedMarginChanged: 2 * time.Second,
	}
	var b bytes.Buffer
	writeUsage(&b, tg, u)
	assert.Contains(t, b.String(), "learned pace: one per 10.4ms, 0 more at once, for 9m; 4% slower than the rule's rate; last set or slowed 3s ago, not sped up since\n")
	assert.Contains(t, b.String(), "learned margin: windows 20ms wider than the rule's, for 10m; last widened or narrowed 2s ago\n")
	now := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	assert.Equal(t, "03:04:05.006  100/1s 0/100  default 100/1s/paced+9 0/10  next now  pause none  learned pace 1/10.4ms (4% slower)  margin +20ms",
		watchLine(now, tg, u))

	u.PaceProbed, u.LearnedPaceProbed = true, 3*time.Second
	b.Reset()
	writeUsage(&b, tg, u)
	assert.Contains(t, b.String(), "; 4% slower than the rule's rate; last sped up by a probe 3s ago\n")
	u.LearnedPaceChanged = time.Second
	b.Reset()
	writeUsage(&b, tg, u)
	assert.Contains(t, b.String(), "; last set or slowed 1s ago, sped up by a probe 3s ago\n")
	u.LearnedPace.Per = 10 * ms
	b.Reset()
	writeUsage(&b, tg, u)
	assert.Contains(t, b.String(), "one per 10ms, 0 more at once, for 9m; at the rule's rate; ")
	assert.NotContains(t, watchLine(now, tg, u), "slower")
}

// runCLI runs the command in process.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// realRedis is the shared redis-server of the tests.
func realRedis(t *testing.T) *redistest.Server {
	srv := redistest.Shared(t)
	if !srv.Real {
		t.Skip("needs redis-server")
	}
	return srv
}

// TestUsageCommand makes reservations with store.NewRedis, then reads them
// with `throttle usage`: the counts are exact (the window is a minute).
func TestUsageCommand(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	rule := fmt.Sprintf("usage%d", time.Now().UnixNano())
	st, err := store.NewRedis(srv.Client(t))
	require.NoError(t, err)
	limits := []contract.Limit{{N: 100, Per: time.Minute + engine.DefaultMargin}, {N: 5000, Per: time.Hour + engine.DefaultMargin}}
	for range 7 {
		res, err := st.Reserve(context.Background(), rule+":pg1", contract.Request{Limits: limits, Cost: 1})
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	code, out, errOut := runCLI("usage", "-redis", url, "-rule", rule, "-limit", "100/1m", "-limit", "5000/1h", "-key", "pg1")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "redis key throttle:{"+rule+":pg1}\n")
	assert.Regexp(t, `(?m)^\s+100/1m\s+1m0.005s\s+7/100\s+0$`, out)
	assert.Regexp(t, `(?m)^\s+5000/1h\s+1h0m0.005s\s+7/5000\s+0$`, out)
	assert.Contains(t, out, "next free slot: now\n")

	// The counters of FixedWindow, through -alg. Units in a window that
	// ended before the read are in neither column: should a window boundary
	// (every 1m0.005s since the epoch, on this machine's clock, which is the
	// server's) fall between the reservations and the read, try again.
	window := int64((time.Minute + engine.DefaultMargin) / time.Microsecond)
	for attempt := 0; ; attempt++ {
		key := fmt.Sprintf("pg2-%d", attempt)
		before := time.Now().UnixMicro() / window
		for range 4 {
			_, err := st.Reserve(context.Background(), rule+":"+key, contract.Request{Limits: limits[:1], Cost: 2, Algorithm: contract.FixedWindow})
			require.NoError(t, err)
		}
		code, out, errOut = runCLI("usage", "-redis", url, "-rule", rule, "-limit", "100/1m", "-alg", "fixed", "-key", key)
		if time.Now().UnixMicro()/window != before && attempt < 3 {
			continue
		}
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, out, "redis key throttle:{"+rule+":"+key+"}:fixed\n")
		assert.Regexp(t, `(?m)^\s+100/1m\s+1m0.005s\s+8/100\s+0$`, out)
		break
	}
}

// TestUsageCommandDefaultPace: a log rule paces its slowest limit by
// default, and usage reads that pace as the rule's requests reserve it: its
// row (the burst of 9 spent, 11 reservations beyond it), and the next free
// slot it sets; a paced limit given with -limit reads the same.
func TestUsageCommandDefaultPace(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	rule := fmt.Sprintf("pace%d", time.Now().UnixNano())
	st, err := store.NewRedis(srv.Client(t))
	require.NoError(t, err)
	// The limits a rule of 100/1m reserves: a spacing of 600.05ms.
	pace := throttle.Paced(100, time.Minute+engine.DefaultMargin, 9)
	pace.SlowStart = true
	limits := []contract.Limit{{N: 100, Per: time.Minute + engine.DefaultMargin}, contract.Limit(pace)}
	for range 12 {
		res, err := st.Reserve(context.Background(), rule+":pg1", contract.Request{Limits: limits, Cost: 1, MaxWait: time.Minute})
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	code, out, errOut := runCLI("usage", "-redis", url, "-rule", rule, "-limit", "100/1m", "-key", "pg1")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^\s+100/1m\s+1m0.005s\s+1/100\s+11$`, out)
	assert.Regexp(t, `(?m)^\s+default 100/1m0.005s/paced\+9\s+1m0.005s\s+10/10\s+11$`, out)
	assert.Regexp(t, `(?m)^next free slot: in \d+(\.\d+)?s \(the default pace\)$`, out)

	code, out, errOut = runCLI("usage", "-redis", url, "-rule", rule, "-limit", "100/1m", "-limit", "5000/1h/paced+9", "-key", "pg1")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^\s+5000/1h/paced\+9\s+1h0m0.005s\s+\d+/10\s+\d+$`, out)
	assert.NotContains(t, out, "default")
}

// A token is never printed; nor the password of the URL; bad flags exit 2.
func TestNoSecretsInOutput(t *testing.T) {
	srv := realRedis(t)
	const token, password = "tok-DO-NOT-PRINT", "pw-DO-NOT-PRINT"
	rule := fmt.Sprintf("secret%d", time.Now().UnixNano())
	for _, args := range [][]string{
		{"usage", "-redis", "redis://" + srv.Addr + "/0", "-rule", rule, "-limit", "1/1s", "-token", token},
		{"watch", "-redis", "redis://" + srv.Addr + "/0", "-rule", rule, "-limit", "1/1s", "-token", token, "-for", "1ms"},
		{"usage", "-redis", "redis://user:" + password + "@" + srv.Addr + "/0", "-rule", rule, "-limit", "1/1s", "-token", token},
		{"usage", "-redis", "redis://user:" + password + "@[::1/0", "-rule", rule, "-limit", "1/1s", "-key", "k"},
		{"check", "-redis", "http://user:" + password + "@" + srv.Addr},
		{"check", "-redis", "redis://user:" + password + "@" + srv.Addr + "/0"},
		{"usage", "-redis", "redis://" + srv.Addr + "/0", "-rule", rule, "-limit", "1/1s", "-token", token, "-by", "cookie:" + token},
	} {
		_, out, errOut := runCLI(args...)
		assert.NotContains(t, out+errOut, token, args)
		assert.NotContains(t, out+errOut, password, args)
	}
	code, _, errOut := runCLI("usage", "-redis", "redis://user:"+password+"@[::1/0", "-rule", "r", "-limit", "1/1s", "-key", "k")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "invalid -redis URL")
	code, _, errOut = runCLI("usage", "-redis", "redis://"+srv.Addr+"/0", "-rule", "r-not-published", "-key", "k")
	assert.Equal(t, exitFailed, code, "no -limit, and no process publishes the rule")
	assert.Contains(t, errOut, "no running process publishes rule r-not-published")
	code, _, _ = runCLI("usage", "-rule", "r", "-limit", "1/1s", "-key", "k", "-token", "t")
	assert.Equal(t, exitUsage, code, "-key and -token")
	code, _, _ = runCLI("nope")
	assert.Equal(t, exitUsage, code)
}

// watch prints a header, then a line at once and one per interval until
// -for ends (how many depends on the machine: at least the first).
func TestWatchCommand(t *testing.T) {
	srv := realRedis(t)
	rule := fmt.Sprintf("watch%d", time.Now().UnixNano())
	st, err := store.NewRedis(srv.Client(t))
	require.NoError(t, err)
	for range 3 {
		_, err := st.Reserve(context.Background(), rule+":pg1", contract.Request{Limits: []contract.Limit{{N: 10, Per: time.Minute + engine.DefaultMargin}}, Cost: 1})
		require.NoError(t, err)
	}
	code, out, errOut := runCLI("watch", "-redis", "redis://"+srv.Addr+"/0", "-rule", rule, "-limit", "10/1m", "-no-default-pace", "-key", "pg1", "-every", "20ms", "-for", "50ms")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 3, "the header and the first line:\n%s", out)
	assert.Equal(t, "definition: given on the command line", lines[0])
	assert.Equal(t, "watching throttle:{"+rule+":pg1} every 20ms", lines[1])
	for _, l := range lines[2:] {
		assert.Regexp(t, `^\d\d:\d\d:\d\d\.\d{3}  10/1m 3/10  next now  pause none$`, l)
	}
}

// reset asks, and deletes only on yes (or -yes).
func TestResetCommand(t *testing.T) {
	srv := realRedis(t)
	url := "redis://" + srv.Addr + "/0"
	rule := fmt.Sprintf("reset%d", time.Now().UnixNano())
	c := srv.Client(t)
	st, err := redisAdmin(c)
	require.NoError(t, err)
	fill := func() {
		_, err := st.Reserve(context.Background(), rule+":pg1", contract.Request{Limits: []contract.Limit{{N: 10, Per: time.Minute}}, Cost: 1})
		require.NoError(t, err)
		require.NoError(t, st.Pause(context.Background(), rule+":pg1", time.Minute))
	}
	exists := func() int64 {
		n, err := c.Exists(context.Background(), st.Keys(rule+":pg1")...).Result()
		require.NoError(t, err)
		return n
	}
	fill()
	require.Equal(t, int64(2), exists())
	args := []string{"reset", "-redis", url, "-rule", rule, "-limit", "10/1m", "-key", "pg1"}

	old := stdin
	defer func() { stdin = old }()
	stdin = strings.NewReader("n\n")
	code, out, _ := runCLI(args...)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, out, "not deleted")
	assert.Equal(t, int64(2), exists())

	stdin = strings.NewReader("y\n")
	code, out, errOut := runCLI(args...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "deleted 2 Redis keys of throttle:{"+rule+":pg1}")
	assert.Zero(t, exists())

	fill()
	stdin = strings.NewReader("")
	code, _, errOut = runCLI(append(args, "-yes")...)
	require.Equal(t, 0, code, errOut)
	assert.Zero(t, exists())
}

// check passes on the test server, and fails (exit 1) for a user whose ACL
// forbids EVALSHA, saying so, without printing the password.
func TestCheckCommand(t *testing.T) {
	srv := realRedis(t)
	code, out, errOut := runCLI("check", "-redis", "redis://"+srv.Addr+"/0")
	require.Equal(t, 0, code, out+errOut)
	for _, want := range []string{"ok    redis ", "ok    eviction: no maxmemory-policy", fmt.Sprintf("ok    SCRIPT LOAD of the %d scripts", len(scriptsOf(srv.Client(t)))), "ok    latency, median of 20: PING "} {
		assert.Contains(t, out, want)
	}

	c := srv.Client(t)
	ctx := context.Background()
	user := fmt.Sprintf("limited%d", time.Now().UnixNano())
	const password = "pw-limited-DO-NOT-PRINT"
	require.NoError(t, c.Do(ctx, "acl", "setuser", user, "on", ">"+password, "~*", "+@all", "-evalsha", "-eval", "-script").Err())
	defer c.Do(ctx, "acl", "deluser", user)
	code, out, errOut = runCLI("check", "-redis", "redis://"+user+":"+password+"@"+srv.Addr+"/0")
	assert.Equal(t, exitFailed, code, out)
	assert.Contains(t, out, "ok    ACL user "+user)
	assert.Contains(t, out, "FAIL  a reservation (EVALSHA)")
	assert.NotContains(t, out+errOut, password)

	old, err := c.ConfigGet(ctx, "maxmemory*").Result()
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	defer c.ConfigSet(ctx, "maxmemory-policy", old["maxmemory-policy"])
	// Without maxmemory nothing is evicted: no warning.
	code, out, _ = runCLI("check", "-redis", "redis://"+srv.Addr+"/0")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "ok    eviction")
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1gb").Err())
	defer c.ConfigSet(ctx, "maxmemory", old["maxmemory"])
	code, out, _ = runCLI("check", "-redis", "redis://"+srv.Addr+"/0")
	assert.Equal(t, exitFailed, code, "the library refuses this server: check fails\n%s", out)
	assert.Regexp(t, `(?m)^FAIL  eviction: .*allkeys-lru.*ErrEvictingPolicy`, out)
	assert.Contains(t, out, "ok    latency", "the latency is measured all the same")
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", old["maxmemory"]).Err())
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", old["maxmemory-policy"]).Err())

	// Under store.ACLRule (no CONFIG), the check runs; without PING (an
	// older ACLRule), it times TIME instead.
	for extra, base := range map[string]string{"": "PING", "-ping": "TIME"} {
		aclUser := fmt.Sprintf("rule%d", time.Now().UnixNano())
		setuser := []any{"acl", "setuser", aclUser, "on", ">" + password}
		for _, f := range strings.Fields(store.ACLRule(store.DefaultPrefix) + " " + extra) {
			setuser = append(setuser, f)
		}
		require.NoError(t, c.Do(ctx, setuser...).Err())
		defer c.Do(ctx, "acl", "deluser", aclUser)
		code, out, _ = runCLI("check", "-redis", "redis://"+aclUser+":"+password+"@"+srv.Addr+"/0")
		assert.Contains(t, out, "ok    latency, median of 20: "+base+" ", out)
		assert.Contains(t, out, "warn  SCRIPT LOAD not allowed", out)
		assert.Equal(t, 0, code, out)
	}
}

// With a key secret, only the HMAC'd key is shown, never the token's plain
// hash (which the secret hides) nor the token.
func TestSecretHidesPlainHash(t *testing.T) {
	srv := realRedis(t)
	const token = "tok-plain-hash"
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600))
	plain, err := operator.CredentialKey("bearer", token)
	require.NoError(t, err)
	code, out, errOut := runCLI("usage", "-redis", "redis://"+srv.Addr+"/0", "-rule", "api", "-limit", "1/1s", "-token", token, "-secret-file", secretFile)
	require.Equal(t, exitFailed, code, errOut)
	assert.Contains(t, out, "no state under throttle:{api:hmac:")
	assert.NotContains(t, out, plain)
	assert.NotContains(t, out, strings.TrimPrefix(plain, "bearer:"))
	assert.NotContains(t, out, token)
	assert.NotContains(t, out, "0123456789abcdef")
}
