package contract

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Lease is a request's place under a key's cap on requests in flight
// (Request.InFlight), taken by the reservation that granted it
// (Reservation.Lease), or a ticket to wait for one in the key's queue when
// none was free (see Leases.Await). The zero Lease holds nothing.
type Lease struct {
	Key string // the rate key
	ID  string // unique across the fleet (Redis: a LIST in the key's slot)
	// Cap and dur (microseconds) are the request's InFlight and LeaseFor:
	// what a release needs to serve the queue.
	Cap int
	Dur int64
	// A ticket: the time the waiter stays in the queue until (µs, store
	// clock; 0: held, not waiting), its longest wait on the caller's clock.
	Deadline int64
	Wait     time.Duration
}

// Held reports whether l holds a place under the cap (and must be given back
// with Leases.Release).
func (l Lease) Held() bool { return l.ID != "" && l.Deadline == 0 }

// Queued reports whether l is a ticket in the key's queue: the caller must
// either wait for a lease with Leases.Await or leave with Leases.Release.
func (l Lease) Queued() bool { return l.Deadline != 0 }

// Leases is the part of a store that caps requests in flight
// (Caps.Leases). Both stores keep it.
type Leases interface {
	// Await waits, at most the queued reservation's MaxWait, until a lease
	// is handed to the ticket (released or expired ones are handed to the
	// queue in order) and returns it, Held. When the wait ends first it
	// leaves the queue and returns a zero Lease; when ctx ends first it
	// leaves too and returns ctx's error.
	Await(ctx context.Context, ticket Lease) (Lease, error)
	// Release gives back a held lease (serving the queue), or leaves the
	// queue with a ticket. Releasing twice, or a lease that expired, is
	// harmless.
	Release(ctx context.Context, l Lease) error
	// Renew extends a held lease by its duration from now. It returns
	// ErrLeaseExpired if the lease had expired (and may have been taken by
	// another request meanwhile).
	Renew(ctx context.Context, l Lease) error
}

// ErrLeaseExpired is returned by Renew for a lease that had expired.
var ErrLeaseExpired = errors.New("store: the lease had expired")

// MaxLease bounds Request.LeaseFor.
const MaxLease = 24 * time.Hour

// leaseValid reports whether r's in-flight fields are well formed.
func (r *Request) leaseValid() bool {
	return r.InFlight == 0 && r.LeaseFor == 0 && r.Held.ID == "" ||
		r.InFlight >= 1 && r.InFlight <= math32 && r.LeaseFor >= time.Millisecond && r.LeaseFor <= MaxLease &&
			(r.Held.ID == "" || r.Held.Held())
}

const math32 = 1<<31 - 1

// leaseInvalid returns the error of an in-flight field of r, nil if none.
func (r *Request) leaseInvalid() error {
	if r.leaseValid() {
		return nil
	}
	return fmt.Errorf("%w: InFlight %d, LeaseFor %s: InFlight must be 0 (no cap, and no LeaseFor or Held), or 1 to %d with LeaseFor from 1ms to %s, and Held a held lease",
		ErrInvalidRequest, r.InFlight, r.LeaseFor, math32, MaxLease)
}

// leaseFor returns the LeaseAt of r at key: the held one, or a new id.
func (r *Request) LeaseAt(key string, newID func() string) Lease {
	if r.Held.ID != "" {
		return Lease{Key: key, ID: r.Held.ID, Cap: r.InFlight, Dur: Micros(r.LeaseFor)}
	}
	return Lease{Key: key, ID: newID(), Cap: r.InFlight, Dur: Micros(r.LeaseFor)}
}

// leaseProcess and leaseSeq make lease ids unique across the fleet: a random
// name for this process, and a counter (also of the stores, for their
// inboxes).
var (
	leaseProcess = func() string {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		return hex.EncodeToString(b[:])
	}()
	leaseSeq atomic.Uint64
)

// NewLeaseID is a new lease id, unique across the fleet.
func NewLeaseID() string { return leaseProcess + "." + strconv.FormatUint(leaseSeq.Add(1), 36) }

// InFlightRefusal is the refusal of a request that found no lease free: retry is
// lease_retry's (lease.lua); deadline, if not 0, how long the caller stays
// in the queue (a ticket).
func InFlightRefusal(l Lease, req Request, retry, deadline int64) Reservation {
	res := Reservation{Cause: CauseInFlight, RetryAfter: FromMicros(retry), Key: l.Key, Cost: int32(req.Cost)}
	if deadline != 0 {
		l.Deadline, l.Wait = deadline, req.MaxWait
		res.Lease = l
	}
	return res
}

// LeasePoll bounds one blocking read of an inbox (BLPOP), below the client's
// default read timeout (3 s), which bounds a command's reply; and the time
// between two checks of a waiter (a lease that expired is handed over by
// the next call that touches the key, or by a waiter's check).
const LeasePoll = time.Second
