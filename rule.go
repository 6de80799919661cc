package throttle

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/internal/upstream"
	"github.com/throttle-go/throttle/store"
)

// defaultMaxWait is a rule's MaxWait when it sets none.
const defaultMaxWait = time.Minute

// defaultMaxServerWait is a rule's MaxServerWait when it sets none.
const defaultMaxServerWait = 30 * time.Second

// defaultMargin is a rule's Margin when it sets none (engine.DefaultMargin,
// which the CLI reads too).
const defaultMargin = engine.DefaultMargin

// NoMargin, as a Rule's Margin, asks for no safety margin at all.
const NoMargin time.Duration = -1

// maxPer is the longest window a Limit may have: a year, which keeps every
// time the scripts handle exact in Lua's numbers.
const maxPer = engine.MaxPer

// maxMargin bounds Margin: more than a minute is a mistake, not a margin.
const maxMargin = time.Minute

// Rule limits the requests it matches. A request is matched by at most one
// rule: among the rules whose Host, PathPrefix and Method all match, the one
// with the longest PathPrefix, then the one with a Method, then one with a
// port, then an exact host over a wildcard, then the first given. A request
// that no rule matches gets the default rule (WithDefault), if there is one;
// otherwise it is refused, unless WithUnmatchedSent says to send it.
type Rule struct {
	// Name names the rule in errors, decisions and logs. Empty: Host,
	// Method and PathPrefix joined, or "default" for the default rule.
	Name string
	// Host matches the request's host, case-insensitively: "api.example.com"
	// with any port, "api.example.com:8443" with that port only, or
	// "*.example.com" for every subdomain. Required, except in the default rule.
	Host string
	// PathPrefix, if set, must start the request's URL path.
	PathPrefix string
	// Method, if set, must equal the request's method.
	Method string

	// Limits must all admit a request, e.g. PerSecond(10) and PerHour(5000).
	Limits []Limit
	// Key derives the rate key. Nil: ByHost().
	Key KeyFunc
	// Cost returns the units a request takes, 1 <= cost <= every limit's N.
	// Nil: every request costs 1.
	Cost func(*http.Request) int
	// Costs estimates, by unit, what a request costs against the limits
	// that count that unit (Limit.Of), 0 <= cost <= each of their N: e.g.
	// the prompt's tokens plus max_tokens. Every unit of Limits needs one.
	// See docs/costs.md.
	Costs map[string]func(*http.Request) int
	// Actual, if set, says where the response states what the request
	// actually cost, per unit: the estimate is settled to it, fleet-wide
	// (see Actual).
	Actual Actual
	// Also names more rate keys, each with its own limits, that must admit
	// a request too, reserved with Key in one atomic step (SlidingLog
	// only): e.g. per token and per app. See KeyLimit and docs/keys.md.
	Also []KeyLimit

	// Lanes, 2 or more, gives the rule priority lanes, 0 to Lanes-1, and
	// Lane says a request's lane (a higher one goes first): a request takes
	// the slot a waiting request of a lower lane holds when that slot is
	// earlier than its own; the waiter goes one slot later. A request of a
	// lower lane costs one more store call, at its slot. SlidingLog only,
	// without Also, a limit of a unit or InFlight. See docs/lanes.md.
	Lanes int
	Lane  func(*http.Request) int

	// Tenant, if set, names a request's tenant (a customer of yours, an
	// account): the waiters of a key are then served in fair shares
	// between tenants, in proportion to Weights (a tenant not in it has
	// weight 1, the most is 10000): backlogged tenants each get their
	// share, one that sends lightly goes before their backlogs, and a
	// share left idle goes to the others. A request that waits costs one
	// more store call, at its slot. A request whose tenant cannot be
	// derived is refused with a *KeyError. SlidingLog only, without Lanes,
	// Also, a limit of a unit or InFlight. See docs/tenants.md.
	Tenant  KeyFunc
	Weights map[string]int

	// FailFast makes a request that finds no free slot now fail at once
	// with a *LimitError, rather than wait. Unset, a request waits for its
	// slot if it comes within MaxWait and before its context's deadline,
	// and fails at once otherwise.
	FailFast bool
	// MaxWait bounds the wait of a request for its slot (not with
	// FailFast). Zero: a minute.
	MaxWait time.Duration
	// Margin is added to every window, so that the upstream, which sees a
	// request a little after it was sent, still never sees more than N in
	// any of its windows (a paced limit's window too: its spacing is
	// (Per + Margin)/N). How late this process sends after its slots is
	// measured and covered apart (Decision.Allowance). Zero: 5ms, enough
	// on loopback and a quiet LAN; over a real network, set at least twice
	// the network's jitter (docs/measurements.md). NoMargin: no margin, no
	// allowance and no retake.
	Margin time.Duration

	// MaxServerWait bounds a wait the upstream imposes (a pause after a
	// 429 or a 503 with Retry-After, an exhausted budget): a request that
	// would wait longer fails at once with a *LimitError whose Upstream is
	// set, carrying RetryAfter, rather than sleep. It applies within
	// MaxWait. Zero: 30 seconds.
	MaxServerWait time.Duration
	// IgnoreUpstream turns off the feedback: the rule's responses are
	// counted (RuleStats.Upstream, WithOnFeedback) but 429s, Retry-After and
	// rate-limit headers change nothing.
	IgnoreUpstream bool
	// Refused describes the upstream's refusals beyond a 429 and a 503
	// with Retry-After (see Refusal): a response it describes is heard as
	// a 429 is, counted (RuleStats.Upstream.Refusals), paused for and
	// retried. NotRefused describes the responses that look like
	// refusals but are not, such as a 429 for an object lock: they are
	// heard as ordinary responses. See docs/feedback.md.
	Refused, NotRefused []Refusal
	// Retries, if positive, retries a throttled response (429, 503 with
	// Retry-After, or one Refused describes) up to that many times, for idempotent requests only
	// (GET, HEAD, OPTIONS, PUT, DELETE, or any request with an
	// Idempotency-Key header) whose body, if any, can be replayed through
	// GetBody. At most 10; not with FailFast. Zero: no retry.
	Retries int
	// NoDefaultPace turns the default pace off: the window limits alone
	// send each window's N as soon as they allow, in bursts, for an
	// upstream known to count exact rolling windows or fixed ones
	// (Instagram's rolling hour, GitHub's hourly window). Unset, a
	// SlidingLog rule without a paced limit of its own also paces its
	// slowest limit with a burst of at least 9: the shape every common
	// server-side limiter accepts at close to its full rate. See
	// docs/pacing.md, "The default shape".
	NoDefaultPace bool
	// Algorithm is how the rule counts: SlidingLog (the zero value, exact),
	// FixedWindow, SlidingCounter or Buckets (approximate, with memory that
	// does not grow with N); see Algorithm and the README's table.
	// Buckets reads each limit's Precision; the others refuse one.
	Algorithm Algorithm

	// InFlight, if positive, caps the rule's requests of one key that are
	// in flight at once, across every process sharing the store: a
	// request holds a lease from its reservation until its response body
	// is read to the end or closed (at once on an error or without a
	// body), for ten LeaseFor at most. Waiting requests are served in
	// order, within MaxWait; one that cannot get a lease in time is
	// refused with a *LimitError whose InFlight is set. With Also, the cap
	// is on the rule's own key. Zero: no cap. See docs/concurrency.md.
	InFlight int
	// LeaseFor is how long a lease outlives a process that dies holding
	// it; a live process renews its leases every half of it, for ten
	// LeaseFor at most (a response body not closed by then gives its lease
	// back, with a warning). From 100ms to 24h; zero: 30 seconds
	// (InFlight only).
	LeaseFor time.Duration

	// Shadow makes the rule a trial run of a limit: it reserves and
	// records its slots exactly as if enforced, and reports its decisions
	// (Decision.Shadow) and its counters (RuleStats.Shadow), but never
	// delays or refuses a request. It is matched apart from the enforced
	// rules, among the shadow rules, so that a request gets both its
	// enforced rule and at most one shadow rule; its name must differ from
	// theirs. A Limiter of a shadow rule lets every use go at once (Wait
	// returns nil, Allow true) and records it. See docs/reference.md,
	// "Shadow rules".
	Shadow bool
}

// rule is a validated Rule, ready to match and reserve.
type rule struct {
	Rule
	host          string // lower case, without a leading "*."
	wildcard      bool
	port          string        // empty: any port
	eff           []Limit       // Limits with Margin added to every window
	scope         string        // prefix of the store keys: the rule's own logs
	maxWait       time.Duration // 0 with FailFast
	maxServerWait time.Duration
	minN          int // the largest cost: the least N, or a paced burst + 1
	auto          int // the index in eff of the default pace (shape.go), -1 if none
	// retake is how much later than its allowance a request may wake and
	// still send: half the margin, or half a paced limit's slack in its
	// spacing, Margin/N, which is all a strict-spacing upstream leaves.
	// The default pace is no limit the rule states: its Margin/2N counts
	// only in pacedRetake, which a slot placed under a learned pace (no
	// burst) takes.
	retake, pacedRetake time.Duration
	stats               *ruleStats // the counters of its name (metrics.go)
	// plan is what the engine needs of the rule (internal/engine), built
	// from the fields above when they are; Leases is its stats'.
	plan engine.Plan
	// ov is the operator's override of the limits, if any (override.go):
	// current() is the plan a new admission uses.
	ov   atomic.Pointer[overridden]
	also []alsoKey // Also, validated (multikey.go)
	tag  int       // the index in also of the HashTag key, -1 if none
	// units are the limits of Limits that count a unit (cost.go), taken
	// out of Limits; counts says the rule or one of its Also counts one.
	units  []unitRule
	counts bool
	// dialect reads the rule's responses (internal/upstream, feedback.go).
	dialect *upstream.Dialect
}

func (r *Rule) displayName(isDefault bool) string {
	if r.Name != "" {
		return r.Name
	}
	if isDefault {
		return "default"
	}
	name := r.Host
	if r.Method != "" {
		name = r.Method + " " + name
	}
	return name + r.PathPrefix
}

// compile validates r and prepares it, one step after another: each checks
// its fields and sets what it derives from them.
func compile(r Rule, isDefault bool) (*rule, error) {
	r.Name = r.displayName(isDefault)
	c := &rule{Rule: r, auto: -1, tag: -1}
	c.splitUnits() // cost.go: the limits of a unit apart
	for _, step := range []func() error{
		func() error { return c.compileMatch(isDefault) }, // Host, PathPrefix, Method
		c.compileLimits,    // Limits and Margin
		c.compileShape,     // the default pace and the retake
		c.compileAlgorithm, // what the store would refuse on every request
		c.compileUnits,     // Costs and Actual, the limits of units (cost.go)
		c.compileWaits,     // FailFast, MaxWait, MaxServerWait, Retries
		c.compileKey,       // Key and the scope of the rule's keys
		c.compileAlso,      // Also (multikey.go)
		c.compileInFlight,  // InFlight and LeaseFor
		c.compileRefusals,  // Refused and NotRefused, the rule's Dialect (refusal.go)
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := c.compileLanes(); err != nil { // lanes.go
		return nil, err
	}
	if err := c.compileTenants(); err != nil { // tenants.go
		return nil, err
	}
	c.counts = len(c.units) > 0 || c.alsoUnits("") // cost.go, multikey.go
	c.plan = engine.Plan{Lanes: c.plan.Lanes, Tenants: c.plan.Tenants, Name: c.Name, Scope: c.scope, Limits: limits(c.eff), Auto: c.auto, Algorithm: contract.Algorithm(c.Algorithm),
		Margin: c.Margin, Retake: c.retake, PacedRetake: c.pacedRetake, MaxWait: c.maxWait, MaxServerWait: c.maxServerWait,
		InFlight: c.InFlight, LeaseFor: c.LeaseFor}
	return c, nil
}

// fail returns a *ConfigError of c that says what is wrong.
func (c *rule) fail(format string, args ...any) error {
	return &ConfigError{Rule: c.Name, Reason: fmt.Sprintf(format, args...)}
}

// compileMatch checks what c matches and sets host, wildcard and port. The
// default rule matches every request.
func (c *rule) compileMatch(isDefault bool) error {
	if isDefault {
		if c.Host != "" || c.PathPrefix != "" || c.Method != "" {
			return c.fail("the default rule matches every request: it takes no Host, PathPrefix or Method")
		}
		return nil
	}
	if c.Host == "" {
		return c.fail("Host is empty (use WithDefault for a rule that matches every host)")
	}
	if strings.ContainsAny(c.Host, "/?#@ ") {
		return c.fail("Host %q must be a host name, optionally with a port, not a URL", c.Host)
	}
	host, port := splitHost(c.Host)
	c.port = port
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, c.wildcard = rest, true
	}
	if host == "" || strings.Contains(host, "*") {
		return c.fail("Host %q: a wildcard must be a leading \"*.\" before a domain", c.Host)
	}
	c.host = host
	if c.PathPrefix != "" && !strings.HasPrefix(c.PathPrefix, "/") {
		return c.fail("PathPrefix %q must start with /", c.PathPrefix)
	}
	c.Method = strings.ToUpper(c.Method)
	return nil
}

// compileLimits checks Limits and Margin, and sets eff, the limits with the
// margin added to their windows, and minN, the largest cost they admit.
func (c *rule) compileLimits() error {
	if len(c.Limits) == 0 {
		return c.fail("no Limits")
	}
	c.Limits = slices.Clone(c.Limits) // the caller may reuse its slice
	switch {
	case c.Margin == 0:
		c.Margin = defaultMargin
	case c.Margin == NoMargin:
		c.Margin = 0
	case c.Margin < 0:
		return c.fail("negative Margin %s", c.Margin)
	case c.Margin > maxMargin:
		return c.fail("Margin %s is above %s", c.Margin, maxMargin)
	}
	for i, l := range c.Limits {
		if l.N < 1 {
			return c.fail("limit %d (%s): N must be at least 1", i, l)
		}
		if l.Per < time.Millisecond || l.Per > maxPer {
			return c.fail("limit %d (%s): Per must be from 1ms to %s", i, l, maxPer)
		}
		if c.minN == 0 || l.N < c.minN {
			c.minN = l.N
		}
		if l.Paced && l.Burst >= 0 && l.Burst+1 < c.minN {
			c.minN = l.Burst + 1
		}
		e := l
		e.Per += c.Margin
		c.eff = append(c.eff, e)
	}
	return nil
}

// compileShape adds the default pace (shape.go), if the rule takes one, to
// its limits, and sets retake from the margin and the paced limits.
func (c *rule) compileShape() error {
	if p, ok := defaultPace(c.Rule); ok {
		c.auto = len(c.Limits)
		c.Limits = append(c.Limits, p)
		e := p
		e.Per += c.Margin
		c.eff = append(c.eff, e)
	}
	c.retake = c.Margin / 2
	c.pacedRetake = c.retake
	for i, l := range c.Limits {
		if !l.Paced {
			continue
		}
		r := c.Margin / time.Duration(2*l.N)
		c.pacedRetake = min(c.pacedRetake, r)
		if i != c.auto {
			c.retake = min(c.retake, r)
		}
	}
	return nil
}

// compileAlgorithm fails here for what the store would refuse on every
// request: an unknown algorithm, a Precision it cannot use, too many buckets.
func (c *rule) compileAlgorithm() error {
	probe := contract.Request{Limits: limits(c.eff), Cost: 1, Algorithm: contract.Algorithm(c.Algorithm)}
	if err := probe.Validate("rule"); err != nil {
		return c.fail("%s", strings.TrimPrefix(err.Error(), contract.ErrInvalidRequest.Error()+": "))
	}
	return nil
}

// compileWaits checks FailFast, MaxWait, MaxServerWait and Retries, and
// sets maxWait (0 with FailFast) and maxServerWait.
func (c *rule) compileWaits() error {
	switch {
	case c.FailFast && c.MaxWait != 0:
		return c.fail("MaxWait is set but so is FailFast, which never waits")
	case c.FailFast:
	case c.MaxWait == 0:
		c.maxWait = defaultMaxWait
	case c.MaxWait < 0:
		return c.fail("negative MaxWait %s", c.MaxWait)
	default:
		c.maxWait = c.MaxWait
	}
	switch {
	case c.MaxServerWait == 0:
		c.maxServerWait = defaultMaxServerWait
	case c.MaxServerWait < 0:
		return c.fail("negative MaxServerWait %s", c.MaxServerWait)
	default:
		c.maxServerWait = c.MaxServerWait
	}
	if c.Retries < 0 || c.Retries > maxRetries {
		return c.fail("Retries %d outside 0..%d", c.Retries, maxRetries)
	}
	if c.Retries > 0 && c.FailFast {
		return c.fail("Retries is set but so is FailFast, which never waits for a retry")
	}
	return nil
}

// compileKey sets the default Key and the scope of the rule's store keys:
// its name, so that rules of other names never share a key.
func (c *rule) compileKey() error {
	if c.Key == nil {
		c.Key = ByHost()
	}
	c.scope = c.Name + ":"
	return nil
}

// checkNames refuses rules of one name (nil rules skipped) that would count
// differently: they share their keys in the store, so the limits with their
// margin and default pace, the algorithm, Also, InFlight and LeaseFor must
// agree.
func checkNames(rules []*rule) error {
	byName := map[string]*rule{}
	for _, r := range rules {
		if r == nil {
			continue
		}
		o, ok := byName[r.Name]
		if !ok {
			byName[r.Name] = r
			continue
		}
		var differ string
		switch {
		case !slices.Equal(o.eff, r.eff) || o.Algorithm != r.Algorithm:
			differ = "Limits, Margin and Algorithm"
		case o.tag != r.tag || !slices.EqualFunc(o.also, r.also, func(x, y alsoKey) bool {
			return x.Name == y.Name && slices.Equal(x.eff, y.eff) && slices.Equal(x.KeyLimit.Limits, y.KeyLimit.Limits)
		}):
			differ = "Also"
		case o.InFlight != r.InFlight || o.LeaseFor != r.LeaseFor:
			differ = "InFlight and LeaseFor"
		default:
			continue
		}
		return &ConfigError{Rule: r.Name, Reason: "rules of the same name share their keys and must have the same " + differ}
	}
	return nil
}

// matches reports whether c applies to req, and how specifically: a longer
// PathPrefix first, then a Method, then a port, then an exact host.
func (c *rule) matches(req *http.Request) (score int, ok bool) {
	host, port := requestHost(req)
	if c.wildcard {
		if !strings.HasSuffix(host, "."+c.host) {
			return 0, false
		}
	} else {
		if host != c.host {
			return 0, false
		}
		score++
	}
	if c.port != "" {
		if port == "" {
			port = defaultPorts[strings.ToLower(req.URL.Scheme)]
		}
		if port != c.port {
			return 0, false
		}
		score += 2
	}
	if c.Method != "" {
		if req.Method != c.Method && !(c.Method == http.MethodGet && req.Method == "") {
			return 0, false
		}
		score += 4
	}
	if !strings.HasPrefix(req.URL.Path, c.PathPrefix) {
		return 0, false
	}
	return score + 8*len(c.PathPrefix), true
}

var defaultPorts = map[string]string{"http": "80", "https": "443"}

// cost returns the request's cost, checked against the limits.
func (c *rule) cost(req *http.Request) (int, error) {
	if c.Cost == nil {
		return 1, nil
	}
	return c.checkCost(c.Cost(req))
}

// checkCost returns n if it is a cost the rule's limits can admit.
func (c *rule) checkCost(n int) (int, error) {
	if most := c.maxCost(); n < 1 || n > most { // override.go: an override may lower it
		return 0, fmt.Errorf("%w: rule %q: cost %d is outside 1..%d", ErrInvalidCost, c.Name, n, most)
	}
	return n, nil
}

// defaultLeaseFor is Rule.LeaseFor when zero.
const defaultLeaseFor = 30 * time.Second

// minLeaseFor bounds Rule.LeaseFor from below: a lease is renewed every half
// of it, one store call each time.
const minLeaseFor = 100 * time.Millisecond

// compileInFlight checks and completes the in-flight fields of c.
func (c *rule) compileInFlight() error {
	switch {
	case c.InFlight == 0 && c.LeaseFor == 0:
		return nil
	case c.InFlight < 0:
		return c.fail("negative InFlight %d", c.InFlight)
	case c.InFlight == 0:
		return c.fail("LeaseFor %s without InFlight", c.LeaseFor)
	case c.LeaseFor == 0:
		c.LeaseFor = defaultLeaseFor
	case c.LeaseFor < minLeaseFor || c.LeaseFor > contract.MaxLease:
		return c.fail("LeaseFor %s must be from %s to %s", c.LeaseFor, minLeaseFor, contract.MaxLease)
	}
	return nil
}

// checkLeases fails when a rule caps requests in flight and st cannot.
func checkLeases(st store.Store, rules []*rule) error {
	if st.Caps().Leases {
		return nil
	}
	for _, r := range rules {
		if r != nil && r.InFlight > 0 {
			return &ConfigError{Rule: r.Name, Reason: fmt.Sprintf("InFlight needs a store that keeps leases; %T does not", st)}
		}
	}
	return nil
}
