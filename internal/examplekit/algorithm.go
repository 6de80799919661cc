package examplekit

import (
	"fmt"

	"github.com/throttle-go/throttle/throttletest"
)

// ParseAlgorithm returns the throttletest.Algorithm whose String is s: "log",
// "gcra" or "fixed", as a command-line flag names it.
func ParseAlgorithm(s string) (throttletest.Algorithm, error) {
	for _, a := range []throttletest.Algorithm{throttletest.SlidingLog, throttletest.GCRA, throttletest.FixedWindow} {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("examplekit: unknown algorithm %q (want log, gcra or fixed)", s)
}
