package throttle

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// unmatchedPolicy says what the transport does with a request that no rule
// matches when there is no default rule (see WithUnmatchedSent).
type unmatchedPolicy int

const (
	// refuseUnmatched refuses the request with an *UnmatchedError and
	// closes its body. It is the default: a host the rules miss (a typo, a
	// proxy's address) would otherwise go unlimited unseen.
	refuseUnmatched unmatchedPolicy = iota
	// sendUnmatched sends the request without a limit, saying nothing but
	// its Decision (outcome Unmatched, logged at Debug).
	sendUnmatched
	// warnUnmatched sends the request without a limit, and logs a warning
	// the first time each host is met, to the WithLogger logger or, without
	// one, to slog.Default(). At most maxWarnedHosts hosts are remembered;
	// past them, one last warning says that later hosts go unreported.
	warnUnmatched
)

// maxWarnedHosts bounds the hosts WithUnmatchedSent(true) remembers, so that a client
// that follows links to ever new hosts holds bounded memory and logs a
// bounded number of warnings.
const maxWarnedHosts = 1000

// unmatchedFix is what a warning tells the user to do.
const unmatchedFix = "add a Rule for the host (WithRule) or a default rule (WithDefault); " +
	"WithUnmatchedSent(false) sends such requests without this warning"

// sendUnmatched handles a request that no rule matched, by the transport's
// unmatchedPolicy.
func (t *Transport) sendUnmatched(ctx context.Context, req *http.Request) (*http.Response, error) {
	if t.unmatched == refuseUnmatched {
		closeBody(req)
		err := &UnmatchedError{Host: hostPort(req)}
		t.observe(ctx, &t.unmatchedStats, Decision{Outcome: Unmatched, Err: err})
		return nil, err
	}
	if t.unmatched == warnUnmatched {
		host := hostPort(req)
		if warn, last := t.warned.add(host); warn {
			l := t.logger
			if l == nil {
				l = slog.Default()
			}
			attrs := []slog.Attr{slog.String("host", host), slog.String("fix", unmatchedFix)}
			if last {
				attrs = append(attrs, slog.String("note", strconv.Itoa(maxWarnedHosts)+" hosts warned of: later hosts are not"))
			}
			l.LogAttrs(ctx, slog.LevelWarn, "throttle: a request matches no rule and is sent without a limit", attrs...)
		}
	}
	t.observe(ctx, &t.unmatchedStats, Decision{Outcome: Unmatched})
	resp, err := t.base.RoundTrip(req)
	if err == nil && resp != nil {
		t.unmatchedStats.count(resp, throttledStatus(resp)) // a 429 to an unmatched request is counted too
	}
	return resp, err
}

// hostPort returns the host of req as requestHost does, with its port if
// the URL has one: never its path or query, which may hold secrets.
func hostPort(req *http.Request) string {
	host, port := requestHost(req)
	if port == "" {
		return host
	}
	return net.JoinHostPort(host, port)
}

// warnedHosts is the set of hosts warnUnmatched has warned of, at most
// maxWarnedHosts. It is safe for concurrent use.
type warnedHosts struct {
	mu   sync.Mutex
	seen map[string]struct{}
	full bool // the set was full when a new host came: the last warning is given
}

// add records host and reports whether to warn of it: true the first time a
// host comes, while the set has room. last is true for the one warning
// given when a new host finds the set full.
func (w *warnedHosts) add(host string) (warn, last bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.seen[host]; ok {
		return false, false
	}
	if len(w.seen) >= maxWarnedHosts {
		if w.full {
			return false, false
		}
		w.full = true
		return true, true
	}
	if w.seen == nil {
		w.seen = make(map[string]struct{})
	}
	w.seen[host] = struct{}{}
	return true, false
}
