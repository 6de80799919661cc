package throttle

import "github.com/throttle-go/throttle/internal/upstream"

// Refusal describes a response by its status, a header and a word of its
// body: every field set must match, and at least one must be set. A rule's
// Refused lists the refusals of its upstream beyond a 429 and a 503 with
// Retry-After, such as GitHub's 403 with X-RateLimit-Remaining: 0,
//
//	{Status: 403, Header: "X-RateLimit-Remaining", Value: "0"}
//
// or Google's 200 with "status": "OVER_QUERY_LIMIT",
//
//	{Status: 200, Body: "OVER_QUERY_LIMIT"}
//
// and its NotRefused the responses that look like refusals but are not,
// such as Stripe's 429 for an object lock, {Status: 429, Body: "lock_timeout"}.
type Refusal struct {
	// Status, if not zero, is the response's status code.
	Status int
	// Header, if set, is present in the response; with Value, one of its
	// values is Value (spaces around it and case ignored).
	Header string
	Value  string
	// Body, if set, appears in the first 4 KiB of the response body as a
	// whole word or phrase, not next to a letter, digit or underscore: an
	// error code such as OVER_QUERY_LIMIT, ThrottlingException or
	// REQUEST_LIMIT_EXCEEDED. Those 4 KiB (or the whole body, if shorter)
	// are read before the response is returned, only from responses whose
	// status and header match; the caller still reads every byte.
	Body string
}

// compileRefusals checks Refused and NotRefused, and builds the rule's
// Dialect, which reads its responses (internal/upstream).
func (c *rule) compileRefusals() error {
	var lists [2][]upstream.Match
	for i, field := range [2][]Refusal{c.Refused, c.NotRefused} {
		name := [2]string{"Refused", "NotRefused"}[i]
		for j, r := range field {
			m := upstream.Match(r)
			if err := m.Check(); err != nil {
				return c.fail("%s[%d]: %v", name, j, err)
			}
			lists[i] = append(lists[i], m)
		}
	}
	c.dialect = upstream.New(limits(c.Limits), c.Margin, lists[0], lists[1])
	return nil
}
