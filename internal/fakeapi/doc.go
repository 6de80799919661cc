// Package fakeapi holds in-process fakes of APIs whose requests cost more
// than one unit, known in full only from the response: an OpenAI-compatible
// chat completions API limited in requests and tokens per minute (OpenAI),
// and a GraphQL API charging query cost from a leaky bucket (Shopify). The
// example programs, the fleet tests and the benchmarks serve them with
// net/http/httptest and read their counts. Each counts on arrival, as the
// real API does, and says in its Stats what it refused.
package fakeapi
