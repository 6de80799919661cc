package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/throttle-go/throttle"
)

// logRecorder is a slog.Handler that keeps every record at Debug and above,
// as "LEVEL message".
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}

// take returns the lines logged since the last take.
func (l *logRecorder) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	l.lines = nil
	return lines
}

func (l *logRecorder) option() throttle.Option { return throttle.WithLogger(slog.New(l)) }

// TestRepeatedRefusalsAreSummed: 30 refusals of one rule, 300ms apart, make
// one line, then one summary with the count when the next comes after 10s.
// While they go on, one summary per 10s; after a quiet spell, the next
// refusal is logged in full again. Successes stay at Debug, one per request.
func TestRepeatedRefusalsAreSummed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var logs logRecorder
		tr := newTransport(t, statusBase, nil, logs.option(),
			throttle.WithRule(throttle.Rule{Name: "x", Host: "x.example", Limits: []throttle.Limit{throttle.PerHour(1)}, FailFast: true}))
		refuse := func() {
			t.Helper()
			assert.ErrorIs(t, get(t, tr, context.Background(), "https://x.example/a"), throttle.ErrLimited)
		}
		assert.NoError(t, get(t, tr, context.Background(), "https://x.example/a"))
		assert.Equal(t, []string{"DEBUG throttle decision"}, logs.take())

		for i := range 30 {
			if i > 0 {
				time.Sleep(300 * time.Millisecond)
			}
			refuse()
		}
		assert.Equal(t, []string{"INFO throttle decision"}, logs.take(), "the first refusal, in full")
		time.Sleep(10*time.Second - 29*300*time.Millisecond)
		refuse() // 10s after the first: the summary; this one is counted in the next
		assert.Equal(t, []string{`INFO throttle: 29 more "limited" decisions for rule "x" in the last 10s`}, logs.take())

		for range 20 {
			time.Sleep(time.Second)
			refuse()
		}
		assert.Equal(t, []string{
			`INFO throttle: 10 more "limited" decisions for rule "x" in the last 10s`,
			`INFO throttle: 10 more "limited" decisions for rule "x" in the last 10s`,
		}, logs.take(), "one line per 10s while the refusals go on")

		time.Sleep(time.Minute)
		refuse()
		assert.Equal(t, []string{
			`INFO throttle: 1 more "limited" decisions for rule "x" in the last 1m0s`,
			"INFO throttle decision",
		}, logs.take(), "after a quiet spell: what was left, then the new refusal in full")
	})
}

// TestStoreOutageIsSummed: during an outage, each rule and policy outcome
// logs one Warn, then a summary; rules do not share their lines.
func TestStoreOutageIsSummed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy  storePolicy
		outcome string
	}{
		{failClosed, `"failed" decisions`},
		{failOpen, `"failed_open" decisions`},
		{failLocal, `"sent_local" decisions`},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var logs logRecorder
				lim := []throttle.Limit{throttle.PerSecond(1000)}
				opts := append([]throttle.Option{logs.option(),
					throttle.WithRule(throttle.Rule{Name: "a", Host: "a.example", Limits: lim}),
					throttle.WithRule(throttle.Rule{Name: "b", Host: "b.example", Limits: lim}),
				}, tc.policy.options(1)...)
				tr := newTransport(t, statusBase, failingStore(errors.New("store down")), opts...)
				for range 25 {
					for _, u := range []string{"https://a.example/", "https://b.example/"} {
						_ = get(t, tr, context.Background(), u)
					}
					time.Sleep(500 * time.Millisecond)
				}
				want := []string{"WARN throttle decision", "WARN throttle decision"} // a, b
				for _, r := range []string{"a", "b"} {
					want = append(want, fmt.Sprintf("WARN throttle: 19 more %s for rule %q in the last 10s", tc.outcome, r))
				}
				assert.Equal(t, want, logs.take())
			})
		})
	}
}

// TestRepeatedThrottledResponsesAreSummed: a storm of 429s logs one line
// and then a summary, as refusals do.
func TestRepeatedThrottledResponsesAreSummed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var logs logRecorder
		tr := newTransport(t, statusBase, nil, logs.option(),
			throttle.WithRule(throttle.Rule{Name: "x", Host: "x.example", Limits: []throttle.Limit{throttle.PerSecond(1000)}, IgnoreUpstream: true}))
		for range 11 {
			assert.NoError(t, get(t, tr, context.Background(), "https://x.example/a?status=429"))
			time.Sleep(time.Second)
		}
		var info []string
		for _, l := range logs.take() {
			if l != "DEBUG throttle decision" {
				info = append(info, l)
			}
		}
		assert.Equal(t, []string{
			"INFO throttle feedback",
			`INFO throttle: 9 more "throttled" responses for rule "x" in the last 10s`,
		}, info)
	})
}
