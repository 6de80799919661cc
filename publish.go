package throttle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/inspect"
	"github.com/throttle-go/throttle/store"
)

// This file publishes the rules a Transport or a Limiter runs in its store,
// for the operator's tools (throttle rules, throttle usage): one record per
// Transport or Limiter, refreshed by its own requests, which expires unless
// refreshed. No goroutine outlives a refresh, so nothing leaks when Close is
// never called; Close removes the record at once.

// Publishing: a record is refreshed at most every publishEvery, at a
// request, and lives publishTTL: a process that sends nothing for that long
// drops out of the list, and reappears at its next request.
const (
	publishEvery   = 10 * time.Second
	publishTTL     = 30 * time.Second
	publishTimeout = time.Second
)

// publisher keeps one record of rules in a store.
type publisher struct {
	board     contract.Rules // nil: the store keeps no records
	inProcess bool           // publish in the caller: no I/O to wait for
	doc       inspect.RulesDoc
	rules     []*rule
	keys      sync.Map // rule name → its key scheme, from its first key
	now       func() time.Time
	ov        *overrider // the operator's overrides, polled as it publishes (override.go)

	mu     sync.Mutex
	last   time.Time // of the last refresh begun
	busy   bool      // a refresh is on its way
	closed bool
	done   sync.WaitGroup
}

// newPublisher prepares the record of rules on st; it does no I/O.
func newPublisher(st store.Store, kind string, rules []*rule, secret bool, now func() time.Time, logger *slog.Logger) *publisher {
	p := &publisher{rules: rules, now: now, ov: newOverrider(st, rules, now, logger)}
	// A process publishes the override it honours at its next request.
	p.ov.changed = func() {
		p.mu.Lock()
		p.last = time.Time{}
		p.mu.Unlock()
	}
	board, ok := st.(contract.Rules)
	if !ok {
		return p
	}
	p.board, p.inProcess = board, st.Caps().InProcess
	host, _ := os.Hostname()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	p.doc = inspect.RulesDoc{Host: host, PID: os.Getpid(), Version: moduleVersion(), Kind: kind,
		Process: host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(suffix)}
	for _, r := range rules {
		d := inspect.RuleDoc{Name: r.Name, Match: r.matchText(), Algorithm: r.Algorithm.String(),
			Margin: int64(r.Margin), NoDefaultPace: r.NoDefaultPace, KeySecret: secret, Shadow: r.Shadow, InFlight: r.InFlight}
		for i, l := range r.Limits {
			if i != r.auto { // the default pace is the rule's shape, not a limit it was given
				d.Limits = append(d.Limits, contract.Limit(l))
			}
		}
		if kind == "limiter" {
			d.Key = "given"
		}
		for i, a := range r.also {
			ad := inspect.AlsoDoc{Name: a.Name, HashTag: i == r.tag}
			for _, l := range a.Limits {
				ad.Limits = append(ad.Limits, contract.Limit(l))
			}
			d.Also = append(d.Also, ad)
			if i == r.tag {
				d.HashTag = a.Name
			}
		}
		p.doc.Rules = append(p.doc.Rules, d)
	}
	return p
}

// matchText says what a rule matches: its host, path prefix and method.
func (c *rule) matchText() string {
	var parts []string
	if c.Host != "" {
		parts = append(parts, "host "+c.Host)
	}
	if c.PathPrefix != "" {
		parts = append(parts, "path "+c.PathPrefix+"*")
	}
	if c.Method != "" {
		parts = append(parts, "method "+c.Method)
	}
	return strings.Join(parts, ", ")
}

// moduleVersion is the version of the throttle module in this binary.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	const path = "github.com/throttle-go/throttle"
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "(devel)"
}

// keyShape matches the keys of the built-in KeyFuncs that carry a
// parameter: "query:<param>:<hash>", "header:<Name>:<hash>".
var keyShape = regexp.MustCompile(`^(query|header):(.+):[0-9a-f]{32}$`)

// keyScheme names how key was derived, never the key itself: a custom
// KeyFunc's key may be a secret.
func keyScheme(key string) string {
	switch {
	case strings.HasPrefix(key, "host:"):
		return "host"
	case strings.HasPrefix(key, authPrefix):
		return "bearer"
	}
	if m := keyShape.FindStringSubmatch(key); m != nil {
		return m[1] + ":" + m[2]
	}
	return "custom"
}

// noteKey records the scheme of the first key rule derived.
func (p *publisher) noteKey(rule, key string) {
	if p == nil || p.board == nil {
		return
	}
	if _, ok := p.keys.Load(rule); !ok {
		p.keys.Store(rule, keyScheme(key))
	}
}

// touch refreshes the record when it is due: in the caller for a store in
// this process, else on a goroutine of its own, one at a time, bounded by
// publishTimeout. Errors are dropped: the record is for operators, and the
// next refresh tries again.
func (p *publisher) touch() {
	if p == nil {
		return
	}
	p.ov.touch()
	if p.board == nil {
		return
	}
	now := p.now()
	p.mu.Lock()
	if p.closed || p.busy || (!p.last.IsZero() && now.Sub(p.last) < publishEvery) {
		p.mu.Unlock()
		return
	}
	p.busy, p.last = true, now
	p.done.Add(1)
	p.mu.Unlock()
	doc := p.record(now)
	if p.inProcess {
		p.publish(doc)
		return
	}
	go p.publish(doc)
}

// record is the record to publish at now.
func (p *publisher) record(now time.Time) []byte {
	doc := p.doc
	doc.Heartbeat = now.UnixMilli()
	doc.Rules = append([]inspect.RuleDoc(nil), p.doc.Rules...)
	for i := range doc.Rules {
		if k, ok := p.keys.Load(doc.Rules[i].Name); ok {
			doc.Rules[i].Key = k.(string)
		}
		if o := p.rules[i].ov.Load(); o != nil && !o.refused {
			doc.Rules[i].Override = limits(o.limits)
		}
	}
	b, err := json.Marshal(doc)
	for len(b) > contract.MaxRulesDoc && len(doc.Rules) > 1 && err == nil {
		doc.Rules = doc.Rules[:len(doc.Rules)/2] // bounded: the first rules only
		b, err = json.Marshal(doc)
	}
	return b
}

func (p *publisher) publish(doc []byte) {
	defer p.done.Done()
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	if len(doc) <= contract.MaxRulesDoc {
		_ = p.board.PublishRules(ctx, p.doc.Process, doc, publishTTL)
	}
	p.mu.Lock()
	p.busy = false
	p.mu.Unlock()
}

// close stops the refreshes, waits for one on its way, and removes the
// record. It is idempotent.
func (p *publisher) close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.ov.close()
	if p.board == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	published := !p.last.IsZero()
	p.mu.Unlock()
	p.done.Wait()
	if !published {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	return p.board.UnpublishRules(ctx, p.doc.Process)
}

// Close removes the record of the rules t publishes in its store, for the
// operator's tools (throttle rules), and stops refreshing it and reading
// the operator's overrides (the last one read stays); without Close the
// record expires 30 s after t's last request. t still works after it,
// unpublished. It is idempotent and safe for concurrent use.
func (t *Transport) Close() error {
	if t == nil || t.core == nil {
		return nil
	}
	return t.pub.close(context.Background())
}

// Close removes the record of the rule l publishes in its store, as
// Transport.Close does.
func (l *Limiter) Close() error {
	if l == nil || l.c == nil {
		return nil
	}
	return l.c.pub.close(context.Background())
}
