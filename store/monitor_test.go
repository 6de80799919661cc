package store_test

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// monitor is a connection in MONITOR mode, for the tests that count the
// commands a script runs.
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
