//go:build integration

package store_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// TestClusterKeysAndSlots runs reservations and cancels for many rate keys
// on a real Redis Cluster while MONITOR records, on every master, each
// command the scripts run. The logs spread over slots and over all three
// masters, and every command a script runs touches exactly the key the
// caller passed in KEYS (no script builds a key name).
func TestClusterKeysAndSlots(t *testing.T) {
	c := redistest.SharedCluster(t)
	cc := c.Client(t)
	s, err := store.NewRedis(cc)
	require.NoError(t, err)

	nodes, err := c.Nodes(ctx)
	require.NoError(t, err)
	var mons []*monitor
	for _, n := range nodes {
		if n.Role == redistest.Master {
			mons = append(mons, startMonitor(t, n.Addr))
		}
	}
	require.Len(t, mons, 3)

	base := uniqueKey(t)
	passed := map[string]bool{}
	slots := map[int]bool{}
	masters := map[string]bool{}
	r := req(1, time.Hour, lim(2, time.Second))
	for i := range 60 {
		key := fmt.Sprintf("%s-%d", base, i)
		rk := s.RedisKey(key)
		passed[rk] = true
		passed[s.FeedbackKey(key)] = true
		require.Equal(t, redistest.Slot(rk), redistest.Slot(s.FeedbackKey(key)), "the feedback key shares the log's slot")
		slots[redistest.Slot(rk)] = true
		m, err := c.MasterOf(ctx, rk)
		require.NoError(t, err)
		masters[m] = true
		var last store.Reservation
		for range 3 {
			last = reserve(t, s, key, r)
			require.True(t, last.Allowed)
		}
		require.NoError(t, s.Cancel(ctx, last))
	}
	assert.Len(t, masters, 3, "60 rate keys should land on every master")
	assert.Greater(t, len(slots), 50, "60 rate keys should land in many slots")

	// A marker written last on each master: once MONITOR has shown it, it
	// has shown everything before it.
	keyed := 0
	for _, m := range mons {
		lines := m.until(t, "redistest-monitor-end")
		for _, l := range lines {
			cmd, args, fromScript := parseMonitor(l)
			if !fromScript {
				continue
			}
			switch cmd {
			case "TIME":
				continue
			case "LLEN", "LINDEX", "LPOP", "LTRIM", "RPUSH", "PTTL", "PEXPIRE", "LREM",
				"HMGET", "HGET", "HGETALL", "HSET", "HDEL", "HINCRBY":
			default:
				t.Errorf("a script ran %s, which this test does not know: %s", cmd, l)
				continue
			}
			require.NotEmpty(t, args, l)
			assert.True(t, passed[args[0]], "a script touched %q, a key no caller passed: %s", args[0], l)
			keyed++
		}
	}
	t.Logf("%d Redis keys (a log and a feedback key per rate key) in %d slots on %d masters; %d keyed commands run by scripts, each on the caller's keys",
		len(passed), len(slots), len(masters), keyed)
	// Each reservation runs at least LINDEX and RPUSH on its key.
	assert.Greater(t, keyed, 60*3*2, "MONITOR saw the scripts' commands")
}

type monitor struct {
	addr  string
	conn  net.Conn
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

// startMonitor opens a connection to addr in MONITOR mode and collects what
// it prints until the test ends.
func startMonitor(t *testing.T, addr string) *monitor {
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	m := &monitor{addr: addr, conn: conn, done: make(chan struct{})}
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	rd := bufio.NewReader(conn)
	first, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", first)
	go func() {
		defer close(m.done)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, strings.TrimRight(l, "\r\n"))
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = conn.Close(); <-m.done })
	return m
}

// until sends a marker command to the node and returns the lines seen before
// MONITOR showed it.
func (m *monitor) until(t *testing.T, marker string) []string {
	conn, err := net.Dial("tcp", m.addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("ECHO " + marker + "\r\n"))
	require.NoError(t, err)
	_, err = bufio.NewReader(conn).ReadString('\n')
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		for i, l := range m.lines {
			if strings.Contains(l, marker) {
				out := append([]string(nil), m.lines[:i]...)
				m.mu.Unlock()
				return out
			}
		}
		m.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("MONITOR on %s never showed the marker", m.addr)
	return nil
}

// parseMonitor splits a MONITOR line such as
// `+1700000000.123456 [0 lua] "LLEN" "throttle:{k}"` into its command and
// arguments, and says whether a script ran it.
func parseMonitor(line string) (cmd string, args []string, fromScript bool) {
	open := strings.IndexByte(line, '[')
	closeB := strings.IndexByte(line, ']')
	if open < 0 || closeB < open {
		return "", nil, false
	}
	fromScript = strings.HasSuffix(line[open+1:closeB], " lua")
	var fields []string
	rest := line[closeB+1:]
	for {
		i := strings.IndexByte(rest, '"')
		if i < 0 {
			break
		}
		// A quoted field ends at the next unescaped quote.
		j := i + 1
		for j < len(rest) && rest[j] != '"' {
			if rest[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(rest) {
			break
		}
		f, err := strconv.Unquote(rest[i : j+1])
		if err != nil {
			f = rest[i+1 : j]
		}
		fields = append(fields, f)
		rest = rest[j+1:]
	}
	if len(fields) == 0 {
		return "", nil, fromScript
	}
	return strings.ToUpper(fields[0]), fields[1:], fromScript
}

// TestClusterScriptFlush: after SCRIPT FLUSH on every master, reservations
// and cancels go on, through EVAL, on every master.
func TestClusterScriptFlush(t *testing.T) {
	cc := redistest.SharedCluster(t).Client(t)
	s, err := store.NewRedis(cc)
	require.NoError(t, err)
	base := uniqueKey(t)
	r := req(1, time.Hour, lim(1, time.Hour))
	for round := range 2 {
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.ScriptFlush(ctx).Err()
		}))
		for i := range 30 {
			key := fmt.Sprintf("%s-%d", base, i)
			res := reserve(t, s, key, r)
			require.True(t, res.Allowed)
			if round == 0 {
				assert.Equal(t, time.Duration(0), res.Delay)
			} else {
				assert.Greater(t, res.Delay, 59*time.Minute, "the log survived the flush")
			}
		}
	}
}
