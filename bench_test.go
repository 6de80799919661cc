package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/store"
)

// The RoundTrip path, and the Limiter's, with the memory store, allocations
// included:
//
//	go test -run '^$' -bench 'RoundTrip|Limiter' -benchmem .
//
// bench/ compares the figures with other limiters (see BENCHMARKS.md).

var benchBase = roundTripperFunc(func(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
})

func benchTransport(b *testing.B, l throttle.Limit) (*throttle.Transport, *http.Request) {
	b.Helper()
	m, err := store.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	tr, err := throttle.New(benchBase, m, throttle.WithRule(throttle.Rule{
		Host: "api.example", Limits: []throttle.Limit{l}, Key: throttle.Fixed("k"), FailFast: true,
	}))
	if err != nil {
		b.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, "http://api.example/v1/x", nil)
	if err != nil {
		b.Fatal(err)
	}
	return tr, req
}

// admitted is a limit no benchmark reaches; refused allows one request an
// hour, spent before the loop.
var (
	admitted = throttle.Per(1<<30, 10*time.Millisecond)
	refused  = throttle.PerHour(1)
)

func BenchmarkRoundTrip(b *testing.B) {
	for _, c := range []struct {
		name  string
		limit throttle.Limit
		sent  bool
	}{{"allowed", admitted, true}, {"refused", refused, false}} {
		check := func(b *testing.B, resp *http.Response, err error) {
			if c.sent && err != nil || !c.sent && !errors.Is(err, throttle.ErrLimited) {
				b.Fatalf("RoundTrip: %v", err)
			}
			if resp != nil {
				_ = resp.Body.Close()
			}
		}
		b.Run(c.name, func(b *testing.B) {
			tr, req := benchTransport(b, c.limit)
			_, _ = tr.RoundTrip(req)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				check(b, resp, err)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			tr, req := benchTransport(b, c.limit)
			_, _ = tr.RoundTrip(req)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := tr.RoundTrip(req)
					check(b, resp, err)
				}
			})
		})
	}
}

// BenchmarkLimiter is BenchmarkRoundTrip without HTTP: Wait for a slot that
// is free, and Allow refused.
func BenchmarkLimiter(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		limit throttle.Limit
		call  func(*throttle.Limiter) error
	}{
		{"wait", admitted, func(l *throttle.Limiter) error { return l.Wait(ctx, "k", 1) }},
		{"allow/refused", refused, func(l *throttle.Limiter) error {
			if ok, err := l.Allow(ctx, "k", 1); ok || err != nil {
				return fmt.Errorf("allowed %v, %v", ok, err)
			}
			return nil
		}},
	} {
		newLimiter := func(b *testing.B) *throttle.Limiter {
			m, err := store.NewMemory()
			if err != nil {
				b.Fatal(err)
			}
			l, err := throttle.NewLimiter(m, throttle.Rule{Name: "bench", Limits: []throttle.Limit{c.limit}})
			if err != nil {
				b.Fatal(err)
			}
			_ = l.Wait(ctx, "k", 1)
			return l
		}
		b.Run(c.name, func(b *testing.B) {
			l := newLimiter(b)
			b.ReportAllocs()
			for b.Loop() {
				if err := c.call(l); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			l := newLimiter(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.call(l); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
