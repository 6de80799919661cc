package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store/internal/memstore"
)

// The memory store's Reserve, allocations included:
//
//	go test -run '^$' -bench Memory -benchmem ./store/
//
// bench/ compares the figures with x/time/rate and go-limiter (BENCHMARKS.md).
func BenchmarkMemoryReserve(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		limit   contract.Limit
		allowed bool
		keys    int
	}{
		{"allowed", contract.Limit{N: 1 << 30, Per: 10 * time.Millisecond}, true, 1},
		{"refused", contract.Limit{N: 1, Per: time.Hour}, false, 1},
		{"allowed/1000keys", contract.Limit{N: 1 << 30, Per: 10 * time.Millisecond}, true, 1000},
	} {
		keys := make([]string, c.keys)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		req := contract.Request{Limits: []contract.Limit{c.limit}, Cost: 1}
		setup := func(b *testing.B) *memstore.Memory {
			m, err := memstore.NewMemory()
			if err != nil {
				b.Fatal(err)
			}
			for _, k := range keys {
				_, _ = m.Reserve(ctx, k, req)
			}
			b.ReportAllocs()
			return m
		}
		check := func(b *testing.B, r contract.Reservation, err error) {
			if err != nil || r.Allowed != c.allowed {
				b.Fatalf("Reserve: allowed=%v err=%v", r.Allowed, err)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			m := setup(b)
			i := 0
			for b.Loop() {
				r, err := m.Reserve(ctx, keys[i%len(keys)], req)
				check(b, r, err)
				i++
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			m := setup(b)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					r, err := m.Reserve(ctx, keys[i%len(keys)], req)
					check(b, r, err)
					i++
				}
			})
		})
	}
}
