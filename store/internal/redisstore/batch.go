package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
)

// MaxBatch is the largest batch WithBatching accepts.
const MaxBatch = 1024

// batchesInFlight is how many batches may be on their way to Redis at once:
// two, so that the next batch is sent while the client reads the replies of
// the one before.
const batchesInFlight = 2

// WithBatching makes concurrent reservations share round trips: a Reserve
// made while two batches are already on their way to Redis waits for one of
// them to come back, then goes with every other call that waited, as one
// pipeline of up to max script calls (group commit). A Reserve made while
// fewer are on their way is sent at once, so a lone caller waits for
// nothing. Each reservation is still its own script call, atomic on its own
// key; only the network round trip, and the server's and the client's work
// per round trip, are shared.
//
// A caller whose context ends while it waits returns at once with the
// context's error; if its reservation had already been sent and was
// granted, the store cancels it (in the background), as the Transport does
// for a waiter. Cancel and the feedback calls are not batched.
//
// Batching needs a client with pipelines (*redis.Client, *redis.ClusterClient,
// *redis.Ring, a failover client or any redis.UniversalClient; a
// ClusterClient splits each pipeline by node). It cannot be combined with
// WithReplicaAck, whose WAIT must follow each script on its own connection.
// max must be between 2 and MaxBatch.
func WithBatching(max int) RedisOption {
	return func(r *Redis) error {
		if max < 2 || max > MaxBatch {
			return fmt.Errorf("store: WithBatching(%d): must be between 2 and %d", max, MaxBatch)
		}
		p, ok := r.client.(pipeliner)
		if !ok {
			return fmt.Errorf("store: WithBatching needs a client with pipelines, not %T", r.client)
		}
		r.batch = &batcher{client: p, max: max, abandon: r.abandon, eval: r.evalRiding}
		return nil
	}
}

type pipeliner interface{ Pipeline() redis.Pipeliner }

// pending is one Reserve in a batch.
type pending struct {
	ctx  context.Context
	call scriptCall
	key  string
	req  contract.Request
	// state: 0 waiting, 1 abandoned by its caller, 2 answered.
	state atomic.Int32
	done  chan batchReply // buffered: the batch never blocks on it
}

type batchReply struct {
	reply []any
	err   error
}

// batcher runs the batches of one store. Nothing runs when no Reserve is
// waiting: the caller that finds fewer than batchesInFlight batches on
// their way sends one itself, and a batch that comes back with callers
// waiting sends the next from a goroutine that ends when none are left.
type batcher struct {
	client  pipeliner
	max     int
	abandon func(key string, req contract.Request, call scriptCall, reply []any)
	// eval sends a batch's script calls, with the overrides waiting to
	// ride along (ride.go).
	eval func(ctx context.Context, p pipeliner, calls []scriptCall) []*redis.Cmd

	mu      sync.Mutex
	queue   []*pending
	running int
}

func (b *batcher) do(ctx context.Context, call scriptCall, key string, req contract.Request) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // as the client would: nothing is sent
	}
	p := &pending{ctx: ctx, call: call, key: key, req: req, done: make(chan batchReply, 1)}
	b.mu.Lock()
	if b.running < batchesInFlight {
		// Fewer batches on their way than allowed means none waits to be
		// sent (calls queue only when the limit is reached, and the last
		// batch to come back sends what queued): this call goes alone, at
		// once, by its caller and on its own context, as without batching.
		b.running++
		b.mu.Unlock()
		b.run(ctx, []*pending{p})
		b.next()
	} else {
		b.queue = append(b.queue, p)
		b.mu.Unlock()
	}
	select {
	case r := <-p.done:
		return r.reply, r.err
	case <-ctx.Done():
		if p.state.CompareAndSwap(0, 1) {
			return nil, ctx.Err()
		}
		r := <-p.done // answered meanwhile
		return r.reply, r.err
	}
}

// takeLocked takes up to max waiting calls from the queue, dropping those
// whose callers have gone: they never reach Redis.
func (b *batcher) takeLocked() []*pending {
	var batch []*pending
	i := 0
	for ; i < len(b.queue) && len(batch) < b.max; i++ {
		if p := b.queue[i]; p.state.Load() == 0 {
			batch = append(batch, p)
		}
	}
	n := copy(b.queue, b.queue[i:])
	clear(b.queue[n:])
	b.queue = b.queue[:n]
	return batch
}

// next sends the calls that queued meanwhile, if any, from a goroutine, so
// that the caller that sent the last batch returns with its answer.
func (b *batcher) next() {
	b.mu.Lock()
	batch := b.takeLocked()
	if len(batch) == 0 {
		b.running--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go func() {
		// The batch is shared, so no one caller's cancellation may cut it;
		// the client's own timeouts bound it, and each caller waits on its
		// own context.
		b.run(context.WithoutCancel(batch[0].ctx), batch)
		b.next()
	}()
}

// run sends one batch as a pipeline of EVALSHA, sends again with EVAL the
// calls whose script the server did not have (NOSCRIPT: nothing ran), and
// answers every caller (eval).
func (b *batcher) run(ctx context.Context, batch []*pending) {
	calls := make([]scriptCall, len(batch))
	for i, p := range batch {
		calls[i] = p.call
	}
	cmds := b.eval(ctx, b.client, calls)
	for i, p := range batch {
		reply, err := cmds[i].Slice()
		if p.state.CompareAndSwap(0, 2) {
			p.done <- batchReply{reply, err}
		} else if err == nil {
			b.abandon(p.key, p.req, p.call, reply)
		}
	}
}

// abandonTimeout bounds the Cancel of a reservation whose caller left.
const abandonTimeout = 5 * time.Second

// abandon cancels, in the background, a reservation granted to a caller
// that had gone by the time its batch came back.
func (r *Redis) abandon(key string, req contract.Request, call scriptCall, reply []any) {
	var res contract.Reservation
	var err error
	if req.InFlight > 0 {
		// The lease id is the call's last argument (withLease).
		l := req.LeaseAt(key, func() string { return call.args[len(call.args)-1].(string) })
		res, err = r.parseLeased(key, req, l, reply)
	} else {
		res, err = r.parseReserve(key, req, reply)
	}
	if err != nil || !res.Allowed && !res.Lease.Queued() {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
		defer cancel()
		_ = r.Cancel(ctx, res)
		_ = r.Release(ctx, res.Lease) // a lease, or a place in the queue
	}()
}
