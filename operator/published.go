package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/inspect"
	"github.com/throttle-go/throttle/store"
)

// Process is what one running Transport or Limiter publishes in its store:
// the rules it runs. A Transport publishes at its first request, then at
// most every 10 s while it sends; its record expires 30 s after, or at its
// Close.
type Process struct {
	// ID is the host, the process ID and a random suffix: one per
	// Transport or Limiter.
	ID      string
	Host    string
	PID     int
	Version string // the throttle module's version in the process
	Kind    string // "transport" or "limiter"
	// Heartbeat is when it last published, on its own clock.
	Heartbeat time.Time
	Rules     []PublishedRule
}

// PublishedRule is one rule as a process runs it. It holds no secret: Key
// names how keys are derived, never a key.
type PublishedRule struct {
	Name  string
	Match string // "host api.example.com, path /v1/*, method GET"; empty for a default rule
	// Limits are the rule's, as written (without Margin).
	Limits        []throttle.Limit
	Algorithm     throttle.Algorithm
	Margin        time.Duration // as applied: 0 for NoMargin
	NoDefaultPace bool
	// Key is how the rule derives its rate keys: "host", "bearer"
	// (ByAuthorization, ByBearerToken), "query:<param>", "header:<Name>",
	// "given" (a Limiter's caller), "custom" (Fixed, FirstOf or a
	// KeyFunc of one's own), or "" until the first request.
	Key string
	// KeySecret says that WithKeySecret is set.
	KeySecret bool
	// HashTag names the Also key whose value starts every key of the rule.
	HashTag string
	Also    []PublishedAlso
	// Shadow says the rule is a shadow rule (throttle.Rule.Shadow): it
	// records what it would do, and enforces nothing.
	Shadow bool
	// InFlight is the rule's cap on requests in flight (0: none).
	InFlight int
	// Override is the operator's override of Limits that the process
	// honours (SetLimits), nil when none. Same does not compare it: a
	// process honours a new override at its next request.
	Override []throttle.Limit
}

// PublishedAlso is one Also key of a published rule.
type PublishedAlso struct {
	Name    string
	Limits  []throttle.Limit
	HashTag bool
}

// Published returns what the processes using st publish, ordered by host,
// process ID and ID. A record that cannot be read is skipped. It returns
// ErrNoPublished when st keeps no records.
func Published(ctx context.Context, st store.Store) ([]Process, error) {
	board, ok := st.(contract.Rules)
	if !ok {
		return nil, fmt.Errorf("%w (%T)", ErrNoPublished, st)
	}
	docs, err := board.PublishedRules(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Process, 0, len(docs))
	for _, b := range docs {
		var d inspect.RulesDoc
		if json.Unmarshal(b, &d) != nil {
			continue
		}
		p := Process{ID: d.Process, Host: d.Host, PID: d.PID, Version: d.Version, Kind: d.Kind, Heartbeat: time.UnixMilli(d.Heartbeat)}
		for _, r := range d.Rules {
			alg, err := contract.ParseAlgorithm(r.Algorithm)
			if err != nil {
				continue
			}
			pr := PublishedRule{Name: r.Name, Match: r.Match, Algorithm: throttle.Algorithm(alg), Margin: time.Duration(r.Margin),
				NoDefaultPace: r.NoDefaultPace, Key: r.Key, KeySecret: r.KeySecret, HashTag: r.HashTag, Shadow: r.Shadow, InFlight: r.InFlight}
			for _, l := range r.Limits {
				pr.Limits = append(pr.Limits, throttle.Limit(l))
			}
			for _, l := range r.Override {
				pr.Override = append(pr.Override, throttle.Limit(l))
			}
			for _, a := range r.Also {
				pa := PublishedAlso{Name: a.Name, HashTag: a.HashTag}
				for _, l := range a.Limits {
					pa.Limits = append(pa.Limits, throttle.Limit(l))
				}
				pr.Also = append(pr.Also, pa)
			}
			p.Rules = append(p.Rules, pr)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Process) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// ErrNoPublished is matched, with errors.Is, by the error of Published when
// the store keeps no published rules.
var ErrNoPublished = fmt.Errorf("operator: the store keeps no published rules")

// Same reports whether a and b define the same rule: the same limits,
// algorithm, margin, default pace, key scheme, key secret, hash tag, Also
// and cap in flight. Match is not compared (two Transports may route differently to
// one rule), and a Key not known yet ("") matches any.
func Same(a, b PublishedRule) bool {
	ka, kb := a.Key, b.Key
	if ka == "" || kb == "" {
		ka, kb = "", ""
	}
	return a.Name == b.Name && slices.Equal(a.Limits, b.Limits) && a.Algorithm == b.Algorithm && a.Margin == b.Margin &&
		a.NoDefaultPace == b.NoDefaultPace && ka == kb && a.KeySecret == b.KeySecret && a.HashTag == b.HashTag && a.Shadow == b.Shadow && a.InFlight == b.InFlight &&
		slices.EqualFunc(a.Also, b.Also, func(x, y PublishedAlso) bool {
			return x.Name == y.Name && x.HashTag == y.HashTag && slices.Equal(x.Limits, y.Limits)
		})
}
