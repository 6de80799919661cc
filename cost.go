package throttle

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
)

// This file is a rule's units (Limit.Of, Rule.Costs): a cost per limit,
// estimated before the request is sent, and settled to what the response
// says the upstream charged (Rule.Actual) as its body passes to the
// caller. docs/costs.md says how, and what is guaranteed.

// Actual says where a response states what a request actually cost, per
// unit, so that the estimate the rule reserved (Rule.Costs) is settled to
// it: a refund gives units back to the fleet, an overrun charges them.
// Status and Header are read when the response arrives; Member is looked for in the
// body as the caller reads it, without consuming or buffering it: each
// JSON object value of a member of that name (in a JSON body or in the
// events of a stream) is passed to Read, and the costs read are merged,
// later ones winning. The settlement is made once, when the body has been
// read to its end, or when it is closed having shown the member (a stream
// of events only at its end); a body closed earlier leaves the estimate.
// Package profiles has ready ones for OpenAI, Anthropic, and GitHub's and
// Shopify's GraphQL APIs.
type Actual struct {
	// Status, if set, returns the actual costs by unit from the
	// response's status code, and whether it found any: e.g. a unit
	// estimated at 0 and counted 1 on a 401, 403 or 429, a budget of
	// invalid responses for an API that bans past it (profiles.Discord).
	// Header and Member, read later, win over it.
	Status func(code int) (map[string]int, bool)
	// Header, if set, returns the actual costs by unit from the
	// response's headers, and whether it found any.
	Header func(http.Header) (map[string]int, bool)
	// Member is the name of the JSON member whose object value holds the
	// actual costs, e.g. "usage"; empty: the body is not read.
	Member string
	// Read returns the actual costs by unit from one value of Member,
	// and whether it found any.
	Read func(value []byte) (map[string]int, bool)
}

// unitRule is one unit of a rule: its name, its limits with the margin,
// its estimate and the largest cost its limits admit.
type unitRule struct {
	name     string
	limits   []Limit // as given
	eff      []contract.Limit
	estimate func(*http.Request) int
	maxCost  int
}

// splitUnits moves the limits of r that count a unit (Limit.Of) out of its
// Limits into its units, in the order their names first appear.
func (c *rule) splitUnits() {
	var own []Limit
	for _, l := range c.Limits {
		if l.Unit == "" {
			own = append(own, l)
			continue
		}
		i := slices.IndexFunc(c.units, func(u unitRule) bool { return u.name == l.Unit })
		if i < 0 {
			i = len(c.units)
			c.units = append(c.units, unitRule{name: l.Unit})
		}
		c.units[i].limits = append(c.units[i].limits, l)
	}
	if c.units != nil {
		c.Limits = own
	}
}

// compileUnits checks the units, Costs and Actual of c, and sets each
// unit's limits with the margin, its estimate and its largest cost.
func (c *rule) compileUnits() error {
	if len(c.units) == 0 && !c.alsoUnits("") { // Also's units: multikey.go
		switch {
		case c.Costs != nil:
			return c.fail("Costs is set but no limit counts a unit (Limit.Of)")
		case c.Actual.set():
			return c.fail("Actual is set but no limit counts a unit (Limit.Of)")
		}
		return nil
	}
	if c.Actual.Member != "" && c.Actual.Read == nil || c.Actual.Member == "" && c.Actual.Read != nil {
		return c.fail("Actual: Member and Read go together")
	}
	if c.Algorithm != SlidingLog {
		return c.fail("limits of a unit (Limit.Of) need the SlidingLog algorithm")
	}
	for name := range c.Costs {
		if !slices.ContainsFunc(c.units, func(u unitRule) bool { return u.name == name }) && !c.alsoUnits(name) {
			return c.fail("Costs[%q]: no limit counts that unit", name)
		}
	}
	probe := contract.Request{Limits: limits(c.eff), Cost: 1}
	for i := range c.units {
		u := &c.units[i]
		if u.estimate = c.Costs[u.name]; u.estimate == nil {
			return c.fail("unit %q: no estimate in Costs", u.name)
		}
		for _, l := range u.limits {
			if l.Per < time.Millisecond || l.Per > maxPer {
				return c.fail("limit %s: Per must be from 1ms to %s", l, maxPer)
			}
			e := contract.Limit(l)
			e.Per += c.Margin
			e.Unit = ""
			u.eff = append(u.eff, e)
			if u.maxCost == 0 || l.N < u.maxCost {
				u.maxCost = l.N
			}
			if l.Paced && l.Burst >= 0 && l.Burst+1 < u.maxCost {
				u.maxCost = l.Burst + 1
			}
		}
		probe.Also = append(probe.Also, contract.Part{Unit: u.name, Limits: u.eff})
	}
	if err := probe.Validate("rule"); err != nil {
		return c.fail("%v", err)
	}
	return nil
}

// set reports whether a says where to read anything.
func (a Actual) set() bool {
	return a.Status != nil || a.Header != nil || a.Member != "" || a.Read != nil
}

// unitCosts returns the unit parts of req under r, the rule's own units
// and then its Also keys' (keyed by also, the parts of those keys): each
// unit's estimate, asked once per unit, checked against its limits under
// each key.
func (r *rule) unitCosts(req *http.Request, also []contract.Part) ([]contract.Part, error) {
	var parts []contract.Part
	est := map[string]int{}
	add := func(u *unitRule, key string) error {
		n, ok := est[u.name]
		if !ok {
			n = u.estimate(req)
			est[u.name] = n
		}
		if n < 0 || n > u.maxCost {
			return fmt.Errorf("%w: rule %q: cost %d of unit %q is outside 0..%d", ErrInvalidCost, r.Name, n, u.name, u.maxCost)
		}
		parts = append(parts, contract.Part{Key: key, Unit: u.name, Cost: n, Limits: u.eff})
		return nil
	}
	for i := range r.units {
		if err := add(&r.units[i], ""); err != nil {
			return nil, err
		}
	}
	for i := range r.also {
		for j := range r.also[i].units {
			if err := add(&r.also[i].units[j], also[i].Key); err != nil {
				return nil, err
			}
		}
	}
	return parts, nil
}

// unitLimitOf is limitOf for the unit part p of k: its key and its limit i.
func (r *rule) unitLimitOf(p contract.Part, i int, k keyed) (string, Limit) {
	units, key := r.units, k.key
	if p.Key != "" {
		for j, a := range r.also {
			if k.also[j].Key == p.Key {
				units = a.units
				_, key, _ = strings.Cut(p.Key, a.scope) // as limitOf
			}
		}
	}
	for _, u := range units {
		if u.name == p.Unit && i < len(u.limits) {
			return key, u.limits[i]
		}
	}
	return key, Limit{}
}

// bill wraps resp's body so that the units a sends are settled to what the
// response says it cost (Rule.Actual), or settles them at once from its
// headers when the rule reads no body.
func (t *Transport) bill(ctx context.Context, r *rule, k keyed, a *engine.Admission, resp *http.Response) {
	if !r.Actual.set() {
		return
	}
	b := t.eng.Bill(a)
	if b == nil {
		return
	}
	s := &settlement{t: t, r: r, k: k, b: b, ctx: context.WithoutCancel(ctx), status: resp.StatusCode, got: map[string]int{}}
	if r.Actual.Status != nil {
		if m, ok := r.Actual.Status(resp.StatusCode); ok {
			s.merge(m)
		}
	}
	if r.Actual.Header != nil {
		if m, ok := r.Actual.Header(resp.Header); ok {
			s.merge(m)
		}
	}
	if r.Actual.Member == "" || r.Actual.Read == nil || resp.Body == nil || resp.Body == http.NoBody {
		s.settle()
		return
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	s.stream = mt == "text/event-stream"
	s.scan = newMemberScanner(r.Actual.Member)
	resp.Body = &billedBody{ReadCloser: resp.Body, s: s}
}

// settlement is the settlement of one response's units, made at most once.
type settlement struct {
	t      *Transport
	r      *rule
	k      keyed
	b      *engine.Bill
	ctx    context.Context
	status int
	stream bool // an event stream: settled at its end only
	scan   *memberScanner
	got    map[string]int // the actual costs read, by unit
	seen   bool           // the body showed the member
	once   sync.Once
}

func (s *settlement) merge(m map[string]int) {
	for u, n := range m {
		s.got[u] = n
	}
}

// settle settles the units read; the others keep their estimate. A
// failure is reported as feedback with its Err; the caller's read goes on.
func (s *settlement) settle() {
	s.once.Do(func() {
		if len(s.got) == 0 {
			return
		}
		units := s.b.Units()
		actual := make([]int64, len(units))
		for i, u := range units {
			actual[i] = u.Cost
			if n, ok := s.got[u.Name]; ok && n >= 0 {
				actual[i] = int64(n)
			}
		}
		if err := s.b.Settle(s.ctx, actual); err != nil {
			s.t.report(s.ctx, Feedback{Rule: s.r.Name, Key: s.k.key, Status: s.status, Err: s.r.storeErr(err)})
		}
	})
}

// billedBody is a response body that scans what passes for the member of
// the rule's Actual and settles at its end.
type billedBody struct {
	io.ReadCloser
	s *settlement
}

func (b *billedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	s := b.s
	for _, v := range s.scan.feed(p[:n]) {
		if m, ok := s.r.Actual.Read(v); ok {
			s.merge(m)
			s.seen = true
		}
	}
	if err == io.EOF {
		s.settle()
	}
	return n, err
}

func (b *billedBody) Close() error {
	err := b.ReadCloser.Close()
	if b.s.seen && !b.s.stream {
		b.s.settle()
	}
	return err
}

// maxMember bounds the value of a member the scanner keeps: a usage object
// is a few hundred bytes; a larger value is skipped.
const maxMember = 8 << 10

// memberScanner finds the object values of a JSON member of one name in
// bytes fed to it piecewise: a JSON document, or the events of a stream.
type memberScanner struct {
	pat   []byte // `"name"`
	m     int    // bytes of pat matched
	prev  byte
	state uint8 // 0 searching, 1 before ':', 2 before '{', 3 in the value
	buf   []byte
	depth int
	str   bool // in a string of the value
	esc   bool
}

func newMemberScanner(name string) *memberScanner {
	return &memberScanner{pat: []byte(`"` + name + `"`)}
}

// feed scans p and returns the values completed in it (each a new slice).
func (s *memberScanner) feed(p []byte) (out [][]byte) {
	for _, c := range p {
		switch s.state {
		case 1:
			if isSpace(c) {
				continue
			}
			if c == ':' {
				s.state = 2
				continue
			}
			s.state = 0
		case 2:
			if isSpace(c) {
				continue
			}
			if c == '{' {
				s.state, s.buf, s.depth, s.str, s.esc = 3, append(s.buf[:0], c), 1, false, false
				continue
			}
			s.state = 0
		case 3:
			if len(s.buf) >= maxMember {
				s.state = 0
				break
			}
			s.buf = append(s.buf, c)
			switch {
			case s.esc:
				s.esc = false
			case s.str && c == '\\':
				s.esc = true
			case c == '"':
				s.str = !s.str
			case !s.str && c == '{':
				s.depth++
			case !s.str && c == '}':
				if s.depth--; s.depth == 0 {
					out = append(out, slices.Clone(s.buf))
					s.state = 0
				}
			}
			s.prev = c
			continue
		}
		// Searching for `"name"`, not escaped (inside a string its quotes
		// would be).
		switch {
		case c == s.pat[s.m] && (s.m > 0 || s.prev != '\\'):
			s.m++
		case c == '"' && s.prev != '\\':
			s.m = 1
		default:
			s.m = 0
		}
		if s.m == len(s.pat) {
			s.m, s.state = 0, 1
		}
		s.prev = c
	}
	return out
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
