package contract

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestValidMatchesInvalid keeps the fast predicate of the Memory store's hot
// path and Validate's explanations in step: valid accepts exactly what
// invalid finds nothing wrong with, on random requests near every boundary.
func TestValidMatchesInvalid(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(v ...time.Duration) time.Duration { return v[rng.IntN(len(v))] }
	accepted := 0
	for range 200_000 {
		r := Request{
			Cost:          rng.IntN(4) - 1,
			MaxWait:       pick(-1, 0, time.Second),
			MaxServerWait: pick(-1, 0, time.Second),
			Algorithm:     Algorithm(rng.IntN(5)),
			Allowance:     pick(-1, 0, time.Millisecond, MaxAllowance, MaxAllowance+1),
		}
		for range rng.IntN(3) {
			r.Limits = append(r.Limits, Limit{
				N:         rng.IntN(4) - 1,
				Per:       pick(0, time.Nanosecond, time.Microsecond, time.Second, time.Hour),
				Precision: pick(-time.Second, 0, 0, time.Nanosecond, time.Microsecond, time.Millisecond, time.Second, 2*time.Second),
				Paced:     rng.IntN(3) == 0,
				Burst:     rng.IntN(5) - 1,
			})
		}
		if rng.IntN(3) == 0 { // more keys (multikey.go)
			r.Also = []Part{}
			for range rng.IntN(3) {
				pt := Part{Key: []string{"", "k", "a", "b"}[rng.IntN(4)]}
				if rng.IntN(3) == 0 { // a unit, under the own key or another part's (units.go)
					pt.Unit, pt.Cost = []string{"u", "v"}[rng.IntN(2)], rng.IntN(3)-1
				}
				for range rng.IntN(3) {
					pt.Limits = append(pt.Limits, Limit{
						N: rng.IntN(4) - 1, Per: pick(0, time.Microsecond, time.Second),
						Precision: pick(0, 0, 0, time.Second), Paced: rng.IntN(5) == 0, Burst: rng.IntN(5) / 4,
					})
				}
				r.Also = append(r.Also, pt)
			}
		}
		if rng.IntN(4) == 0 { // a cap in flight (lease.go)
			r.InFlight, r.LeaseFor = rng.IntN(3)-1, pick(0, time.Second)
		}
		key := []string{"", "k"}[rng.IntN(2)]
		err := r.Invalid(key)
		if _, _, ok := r.Valid(key); ok != (err == nil) {
			t.Fatalf("%+v key %q: valid %v, invalid %v", r, key, ok, err)
		}
		if err == nil {
			accepted++
		}
	}
	if accepted == 0 {
		t.Fatal("no valid request generated: the test proves little")
	}
}
