package contract

import (
	"fmt"
	"time"
)

// Algorithm is how a store counts the units sent under a key. Every store
// offers every algorithm; a Request picks one, and a key should always be
// reserved with the same one (each keeps its own state, under its own Redis
// key).
//
// Only SlidingLog is exact. The others keep counters instead of one entry per
// unit, so their memory does not grow with N: a log of 1,000,000 per day holds
// a million entries, a counter a handful of integers. They pay for it in
// accuracy at window edges, against an upstream that counts a true sliding
// window; README.md gives the figures measured for each.
type Algorithm uint8

const (
	// SlidingLog keeps the send time of every unit and reserves the earliest
	// time at which every limit admits the request: at most N units in any
	// interval of length Per, exactly. Memory: about 10 bytes per unit of
	// the largest limit. It is the default.
	SlidingLog Algorithm = iota
	// FixedWindow counts the units of each aligned window [k·Per,
	// (k+1)·Per): at most N per aligned
	// window, but up to 2N in an interval of length Per that straddles a
	// window boundary. Memory: a few counters per limit.
	FixedWindow
	// SlidingCounter weights the previous aligned window's count by the
	// share of it still inside the sliding window: the estimate
	// stays at most N, but units bunched at the end of the previous window
	// are undercounted, so an interval of length Per can hold more than N
	// (at most 2N, much less in practice). Memory: a few counters per limit.
	SlidingCounter
	// Buckets counts units in buckets of Limit.Precision and sums the
	// ceil(Per/Precision) buckets that end with the current one (the
	// precision buckets): an interval of length Per can hold N plus the
	// units of the one bucket it partly covers. Precision zero means Per,
	// which is FixedWindow. Memory and time per call grow with the number of
	// buckets, at most MaxBuckets.
	Buckets
)

// MaxBuckets bounds ceil(Per/Precision) for Buckets: every call reads every
// bucket of the key.
const MaxBuckets = 4096

var algorithmNames = [...]string{"log", "fixed", "counter", "buckets"}

// String returns the short name of a: "log", "fixed", "counter" or "buckets".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the Algorithm of a short name, as String writes it.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if s == n {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("store: unknown algorithm %q (want log, fixed, counter or buckets)", s)
}

// validate checks what is particular to a's limits; Request.Validate has
// checked the rest.
func (a Algorithm) validate(limits []Limit) error {
	if int(a) >= len(algorithmNames) {
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidRequest, uint8(a))
	}
	for _, l := range limits {
		if l.Paced && a != SlidingLog {
			return fmt.Errorf("%w: limit %s: a paced limit needs the log algorithm, not %s", ErrInvalidRequest, l, a)
		}
		switch {
		case l.Precision < 0:
			return fmt.Errorf("%w: limit %s: negative Precision", ErrInvalidRequest, l)
		case l.Precision == 0:
		case a != Buckets:
			return fmt.Errorf("%w: limit %s: Precision is for the buckets algorithm, not %s", ErrInvalidRequest, l, a)
		case l.Precision < time.Microsecond || l.Precision > l.Per:
			return fmt.Errorf("%w: limit %s: Precision must be between 1µs and Per", ErrInvalidRequest, l)
		}
		if a == Buckets {
			if b := l.Buckets(); b > MaxBuckets {
				return fmt.Errorf("%w: limit %s: %d buckets, more than %d", ErrInvalidRequest, l, b, MaxBuckets)
			}
		}
	}
	return nil
}

// BucketLen is the bucket length of l in microseconds: Precision, or Per.
func (l Limit) BucketLen() int64 {
	if l.Precision == 0 {
		return Micros(l.Per)
	}
	return Micros(l.Precision)
}

// Buckets is how many Buckets of l's precision make up its window.
func (l Limit) Buckets() int64 {
	w, p := Micros(l.Per), l.BucketLen()
	return (w + p - 1) / p
}

// Span is the window or bucket length of l for alg, in microseconds.
func Span(alg Algorithm, l Limit) int64 {
	if alg == Buckets {
		return l.BucketLen()
	}
	return Micros(l.Per)
}
