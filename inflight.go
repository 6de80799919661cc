package throttle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/store"
)

// This file is the public side of the cap on requests in flight
// (Rule.InFlight): its validation, and the response body that holds a
// request's lease (internal/engine/lease.go keeps the lease).
// docs/concurrency.md has the design and its costs.

// defaultLeaseFor is Rule.LeaseFor when zero.
const defaultLeaseFor = 30 * time.Second

// minLeaseFor bounds Rule.LeaseFor from below: a lease is renewed every half
// of it, one store call each time.
const minLeaseFor = 100 * time.Millisecond

// compileInFlight checks and completes the in-flight fields of c.
func (c *rule) compileInFlight() error {
	switch {
	case c.InFlight == 0 && c.LeaseFor == 0:
		return nil
	case c.InFlight < 0:
		return c.fail("negative InFlight %d", c.InFlight)
	case c.InFlight == 0:
		return c.fail("LeaseFor %s without InFlight", c.LeaseFor)
	case c.LeaseFor == 0:
		c.LeaseFor = defaultLeaseFor
	case c.LeaseFor < minLeaseFor || c.LeaseFor > contract.MaxLease:
		return c.fail("LeaseFor %s must be from %s to %s", c.LeaseFor, minLeaseFor, contract.MaxLease)
	}
	return nil
}

// checkLeases fails when a rule caps requests in flight and st cannot.
func checkLeases(st store.Store, rules []*rule) error {
	if st.Caps().Leases {
		return nil
	}
	for _, r := range rules {
		if r != nil && r.InFlight > 0 {
			return &ConfigError{Rule: r.Name, Reason: fmt.Sprintf("InFlight needs a store that keeps leases; %T does not", st)}
		}
	}
	return nil
}

// bindLease gives the lease h back when resp's body is read to its end or
// closed, at once when it has none. It is safe on a nil h.
func bindLease(h *engine.Hold, resp *http.Response) {
	if h == nil {
		return
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		h.Release()
		return
	}
	h.Bind() // the longest hold counts from here, not from the slot's wait
	resp.Body = &leasedBody{resp.Body, h}
}

// leasedBody is a response body that releases its request's lease.
type leasedBody struct {
	io.ReadCloser
	h *engine.Hold
}

func (b *leasedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.h.Release()
	}
	return n, err
}

func (b *leasedBody) Close() error {
	err := b.ReadCloser.Close()
	b.h.Release()
	return err
}

// reclaimed warns that a response body was not closed within held: its
// request's lease under the rule's InFlight was given back
// (engine.Config.OnReclaim).
func (c *core) reclaimed(rule string, held time.Duration) {
	ctx := context.Background()
	if c.logger == nil || !c.logger.Enabled(ctx, slog.LevelWarn) ||
		!c.logFull(ctx, slog.LevelWarn, logKind{rule: rule, feedback: bodyNotClosed}) {
		return
	}
	c.logger.LogAttrs(ctx, slog.LevelWarn,
		fmt.Sprintf("throttle: rule %q: a response body was not closed within %s: its lease under InFlight is given back; close every response body", rule, held),
		slog.String("rule", rule), slog.Duration("held", held))
}
