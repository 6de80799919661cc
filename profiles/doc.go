// Package profiles holds ready rules for well-known APIs: each function
// returns a throttle.Rule that bundles the API's host, how it keys its
// limits, the limits its documentation states, and what its refusals look
// like, so that the common case is one line,
//
//	t, err := throttle.New(nil, st, throttle.WithRule(profiles.GitHub()))
//
// and any field of the returned Rule can be changed before it is given to
// throttle.WithRule (a name, a margin, a limit a contract raised). Each
// profile says which documented facts it encodes, and as of when; see
// docs/profiles.md. What a profile cannot say yet (routes that share a
// Discord bucket) is written in its comment.
package profiles
