package profiles

import (
	"encoding/json"

	"github.com/throttle-go/throttle"
)

// This file holds what a response says a request actually cost, per API:
// a rule's Actual, which settles its estimate (docs/costs.md).

// OpenAIUsage reads OpenAI's usage object ({"prompt_tokens": …,
// "completion_tokens": …, "total_tokens": …}, in the body, or in the last
// event of a stream asked with stream_options.include_usage) as
// total_tokens of unit, the tokens a tokens-per-minute limit counts.
func OpenAIUsage(unit string) throttle.Actual {
	return throttle.Actual{Member: "usage", Read: func(v []byte) (map[string]int, bool) {
		var u struct {
			Prompt     *int `json:"prompt_tokens"`
			Completion *int `json:"completion_tokens"`
			Total      *int `json:"total_tokens"`
		}
		if json.Unmarshal(v, &u) != nil {
			return nil, false
		}
		switch {
		case u.Total != nil:
			return map[string]int{unit: *u.Total}, true
		case u.Prompt != nil && u.Completion != nil:
			return map[string]int{unit: *u.Prompt + *u.Completion}, true
		}
		return nil, false
	}}
}

// AnthropicUsage reads Anthropic's usage object ({"input_tokens": …,
// "output_tokens": …}, with cache_creation_input_tokens counted as input;
// in a stream, message_start's then message_delta's) as the units input and
// output, as its input- and output-tokens-per-minute limits count them. An
// empty name skips that unit.
func AnthropicUsage(input, output string) throttle.Actual {
	return throttle.Actual{Member: "usage", Read: func(v []byte) (map[string]int, bool) {
		var u struct {
			Input    *int `json:"input_tokens"`
			Creation *int `json:"cache_creation_input_tokens"`
			Output   *int `json:"output_tokens"`
		}
		if json.Unmarshal(v, &u) != nil {
			return nil, false
		}
		out := map[string]int{}
		if u.Input != nil && input != "" {
			out[input] = *u.Input
			if u.Creation != nil {
				out[input] += *u.Creation
			}
		}
		if u.Output != nil && output != "" {
			out[output] = *u.Output
		}
		return out, len(out) > 0
	}}
}

// GitHubGraphQLCost reads the points a GitHub GraphQL query cost from the
// rateLimit object the query asks for (`rateLimit { cost remaining resetAt }`,
// in data) as unit, which its points-per-hour limit counts. A query that
// does not ask for it keeps its estimate.
func GitHubGraphQLCost(unit string) throttle.Actual {
	return throttle.Actual{Member: "rateLimit", Read: func(v []byte) (map[string]int, bool) {
		var r struct {
			Cost *int `json:"cost"`
		}
		if json.Unmarshal(v, &r) != nil || r.Cost == nil {
			return nil, false
		}
		return map[string]int{unit: *r.Cost}, true
	}}
}

// ShopifyGraphQLCost reads what a Shopify GraphQL query cost from
// extensions.cost ({"requestedQueryCost": …, "actualQueryCost": …,
// "throttleStatus": {…}}) as unit: actualQueryCost, the points its bucket
// finally counts once the requested cost it took up front is refunded. A
// throttled query (actualQueryCost null) cost nothing.
func ShopifyGraphQLCost(unit string) throttle.Actual {
	return throttle.Actual{Member: "cost", Read: func(v []byte) (map[string]int, bool) {
		var c struct {
			Requested *int `json:"requestedQueryCost"`
			Actual    *int `json:"actualQueryCost"`
		}
		if json.Unmarshal(v, &c) != nil || c.Requested == nil {
			return nil, false
		}
		if c.Actual == nil {
			return map[string]int{unit: 0}, true
		}
		return map[string]int{unit: *c.Actual}, true
	}}
}
