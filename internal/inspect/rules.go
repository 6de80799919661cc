package inspect

import "github.com/throttle-go/throttle/internal/contract"

// RulesDoc is what one process publishes of its rules in the store
// (contract.Rules), as JSON: what a throttle.Transport or Limiter runs, for
// the operator package to read. It holds no secret: a key scheme names how
// a key is derived, never a key or a token.
type RulesDoc struct {
	Process string `json:"process"` // host, pid and a random suffix
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Version string `json:"version"` // the throttle module's, "(devel)" when unknown
	Kind    string `json:"kind"`    // "transport" or "limiter"
	// Heartbeat is when the process published, Unix ms on its own clock.
	Heartbeat int64     `json:"heartbeat_ms"`
	Rules     []RuleDoc `json:"rules"`
}

// RuleDoc is one published rule.
type RuleDoc struct {
	Name  string `json:"name"`
	Match string `json:"match,omitempty"` // host, path prefix and method; empty for the default rule
	// Limits are the rule's as written (without Margin).
	Limits        []contract.Limit `json:"limits"`
	Algorithm     string           `json:"algorithm"`
	Margin        int64            `json:"margin_ns"` // the effective margin; 0 for NoMargin
	NoDefaultPace bool             `json:"no_default_pace,omitempty"`
	// Key is how the rate key is derived: "host", "bearer",
	// "query:<param>", "header:<Name>", "given" (a Limiter's caller gives
	// it), "custom", or "" before the first request.
	Key       string    `json:"key"`
	KeySecret bool      `json:"key_secret,omitempty"` // WithKeySecret is set
	HashTag   string    `json:"hash_tag,omitempty"`   // the Also key whose value starts every key
	Also      []AlsoDoc `json:"also,omitempty"`
	Shadow    bool      `json:"shadow,omitempty"`
	InFlight  int       `json:"in_flight,omitempty"` // the cap on requests in flight, 0: none
	// Override is the operator's override of Limits the process honours
	// (throttle set), if any.
	Override []contract.Limit `json:"override,omitempty"`
}

// AlsoDoc is one Also key of a published rule.
type AlsoDoc struct {
	Name    string           `json:"name"`
	Limits  []contract.Limit `json:"limits"`
	HashTag bool             `json:"hash_tag,omitempty"`
}
