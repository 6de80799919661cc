// Package throttle keeps a fleet of HTTP clients under a third party's rate
// limit, so that none of them receives a 429 while the whole quota is used.
//
// Start with New, which returns a Transport (an http.RoundTripper) for an
// http.Client, and a Rule per upstream given with WithRule: the Host it
// matches, its Limits (PerSecond, PerMinute, PerHour, PerDay, Per, or Paced
// for evenly spaced sends) and its Key, a KeyFunc that names the log a
// request counts in: ByHost (the default), Fixed for a payment gateway,
// ByAuthorization, ByBearerToken, ByHeader or ByQuery for a credential
// (hashed, never stored as it is), FirstOf to try several. The state lives in
// a store shared by every process: store.NewRedis for a fleet,
// store.NewMemory for one process.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	st, _ := store.NewRedis(rdb)
//	tr, err := throttle.New(nil, st, throttle.WithRule(throttle.Rule{
//		Host: "api.gateway.example", Limits: []throttle.Limit{throttle.PerSecond(100)},
//		Key: throttle.Fixed("pg1"),
//	}))
//	client := &http.Client{Transport: tr}
//
// For each request the Transport finds the Rule that matches (by host, path
// prefix and method), derives its rate key, and reserves the next free send
// slot in that key's log, in one store call. The request then sleeps until
// its slot, bounded by MaxWait and its context; with Rule.FailFast, or when
// the slot is too far away, it fails at once with a *LimitError that
// errors.Is(err, ErrLimited) finds. A request that no rule matches is
// refused with an *UnmatchedError, unless WithDefault gives a rule for the
// rest or WithUnmatchedSent says to send it. NewLimiter gives the same
// limits without HTTP: a gRPC call, an SDK's, a queue's.
//
// The guarantee: for every key and every limit of N per W, in any interval
// of length W the fleet sends at most N units, counted when they are sent.
//
// When the store fails, a request is refused with a *StoreError (errors.Is
// ErrStoreUnavailable), by default; WithFailOpen sends it uncounted,
// WithFailLocal counts it in the process with a share of each limit. A
// failed store is marked down and probed with backoff, one request at a
// time, so a dead Redis does not cost every request a timeout. WithKeySecret
// keys the hashing of rate keys with a secret.
//
// The transport also listens to the upstream: a 429, or a 503 with
// Retry-After, pauses the key for the whole fleet, and rate-limit headers
// (X-RateLimit-*, the IETF RateLimit and RateLimit-Policy fields, Meta's
// X-App-Usage) tighten its limit, never loosen it, through the same store.
// A pause longer than the rule's MaxServerWait fails at once with a
// *LimitError whose Upstream is set; throttled idempotent requests may be
// retried (Rule.Retries).
//
// Transport.Stats counts, per rule, the requests by outcome, their waits,
// the store failures and what the upstreams said; the modules
// metrics/prometheus and metrics/otel export the counts. WithLogger logs the
// decisions, a repeated refusal or store failure once per 10s with a count.
// The package operator reads one key's state for an operator's tools.
package throttle
