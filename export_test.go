package throttle

import "github.com/throttle-go/throttle/internal/engine"

// Measured makes tr a transport that has measured its lateness on the wire
// (zero, on a fake clock), so that a test of exact send times starts there
// rather than from the cautious allowance of a process that has measured
// nothing yet.
func Measured(tr *Transport) *Transport {
	tr.eng.Measured()
	return tr
}

// MaxWarnedHosts is how many hosts WithUnmatchedSent(true) remembers, for the tests.
const MaxWarnedHosts = maxWarnedHosts

// MeasuredLimiter is Measured for a Limiter.
func MeasuredLimiter(l *Limiter) *Limiter {
	l.c.eng.Measured()
	return l
}

// The tuning values, for the external tests.
const (
	DefaultBurst        = defaultBurst
	DefaultMargin       = defaultMargin
	DefaultStoreTimeout = engine.DefaultStoreTimeout
	MaxKeyLen           = maxKeyLen
	MaxPer              = maxPer
	MaxRetries          = maxRetries
	MaxServerPause      = maxServerPause
	MinKeySecretLen     = minKeySecretLen
)

// Outcomes is the type of RuleStats.Requests, for the external tests.
type Outcomes = [numOutcomes]uint64
