package examplekit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/throttle-go/throttle"
)

// errorPause is how long a worker of Drive rests after an error other than a
// refusal (upstream down, store unreachable), so that it never spins.
const errorPause = 200 * time.Millisecond

// Tally drives a load through a client and counts what the client saw: the
// requests the throttle sent and how long it held them, the answers by
// status, the refusals and the errors. It is the client's side of a load
// test, as Upstream.Stats is the third party's. It is safe for concurrent
// use.
type Tally struct {
	progress io.Writer

	mu     sync.Mutex
	counts Counts
	waits  []time.Duration
}

// Counts is a snapshot of a Tally.
type Counts struct {
	// Sent counts the requests the throttle handed to the network.
	Sent int
	// OK counts the answers with a 2xx status.
	OK int
	// TooMany counts the answers with status 429.
	TooMany int
	// Limited counts the requests the throttle refused (throttle.ErrLimited)
	// but for those in Cut.
	Limited int
	// Cut counts the requests cut short by the end of the load: in flight
	// or waiting for their slot when it came, or refused because their slot
	// lay beyond it (a *throttle.LimitError with BeyondDeadline, when the
	// load's context has a deadline). A healthy run that ends at a deadline
	// has a few, up to one per worker; they are not refusals by a limit.
	Cut int
	// Errors counts the other errors and the other statuses.
	Errors int
	// WaitP50 and WaitP99 are percentiles, by nearest rank and rounded to
	// 10µs, of how long the throttle held the sent requests.
	WaitP50, WaitP99 time.Duration
	// FirstError is the first error or unexpected status counted in Errors,
	// nil if none. A *url.Error is unwrapped, since its URL may hold a
	// secret such as an access token.
	FirstError error
}

// String returns the summary line
// "sent=… ok=… 429=… limited=… cut=… errors=… wait_p50=… wait_p99=…".
func (c Counts) String() string {
	return fmt.Sprintf("sent=%d ok=%d 429=%d limited=%d cut=%d errors=%d wait_p50=%s wait_p99=%s",
		c.Sent, c.OK, c.TooMany, c.Limited, c.Cut, c.Errors, c.WaitP50, c.WaitP99)
}

// NewTally returns an empty Tally. If progress is not nil, Drive writes a
// line to it every second, such as
// "[ 2.0s] sent=… ok=… 429=… limited=… cut=… errors=… wait_max=…" (the time
// since Drive began; the longest wait of the requests sent in that second),
// and once "first error: …" when an error is first counted.
func NewTally(progress io.Writer) *Tally { return &Tally{progress: progress} }

// OnDecision is the hook to pass to throttle.WithOnDecision: it counts the
// requests the throttle sent, and how long each waited for its slot.
func (t *Tally) OnDecision(d throttle.Decision) {
	if d.Outcome != throttle.Sent {
		return
	}
	t.mu.Lock()
	t.counts.Sent++
	t.waits = append(t.waits, d.Delay)
	t.mu.Unlock()
}

// Drive runs workers goroutines until ctx ends, each calling send in a loop
// with its worker number (0 to workers-1) and its count of calls so far, and
// counts each result; it closes every response body. A 429 is an answer,
// counted in TooMany. After a refusal (a *throttle.LimitError) the worker
// sleeps its RetryAfter, as a queue consumer would requeue the job, and after
// another error a short pause; it sleeps no longer than ctx lasts. Drive
// returns when every worker has. Requests cut short by the end of ctx,
// including those refused because their slot lay beyond its deadline, are
// counted in Cut.
func (t *Tally) Drive(ctx context.Context, workers int, send func(ctx context.Context, worker, call int) (*http.Response, error)) {
	if t.progress != nil {
		stop := make(chan struct{})
		var printer sync.WaitGroup
		printer.Go(func() { t.report(stop, time.Second) })
		defer printer.Wait()
		defer close(stop)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for call := 0; ctx.Err() == nil; call++ {
				resp, err := send(ctx, w, call)
				if pause := t.count(ctx, resp, err); pause > 0 {
					sleep(ctx, pause)
				}
			}
		})
	}
	wg.Wait()
}

// count counts one result of send and returns how long its worker should
// rest.
func (t *Tally) count(ctx context.Context, resp *http.Response, err error) time.Duration {
	if err == nil {
		// Read the body through, so that its connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var limited *throttle.LimitError
	switch {
	case err == nil && resp.StatusCode == http.StatusTooManyRequests:
		t.counts.TooMany++
	case err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300:
		t.counts.OK++
	case err == nil:
		t.failed(fmt.Errorf("unexpected status %d", resp.StatusCode))
	case errors.As(err, &limited):
		if limited.BeyondDeadline && beyondEnd(ctx, limited.RetryAfter) {
			// Its slot lay beyond the end of the load: the worker rests
			// until the end, not for RetryAfter, whose timer may fire a
			// moment before the load's own deadline and send once more.
			t.counts.Cut++
			end, _ := ctx.Deadline()
			return time.Until(end) + time.Second
		}
		t.counts.Limited++
		return max(limited.RetryAfter, time.Millisecond)
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		t.counts.Cut++ // the load is over: the request was cut short
	default:
		t.failed(err)
		return errorPause
	}
	return 0
}

// beyondEnd reports whether a slot d from now lies at or beyond the deadline
// of ctx, the load's end.
func beyondEnd(ctx context.Context, d time.Duration) bool {
	end, ok := ctx.Deadline()
	return ok && !time.Now().Add(d).Before(end)
}

// failed counts an error; t.mu is held.
func (t *Tally) failed(err error) {
	t.counts.Errors++
	if t.counts.FirstError == nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		t.counts.FirstError = err
	}
}

// sleep waits for d or until ctx ends, whichever comes first.
func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// Counts returns what the Tally has counted so far.
func (t *Tally) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counts
	w := slices.Clone(t.waits)
	slices.Sort(w)
	c.WaitP50, c.WaitP99 = percentile(w, 50), percentile(w, 99)
	return c
}

// report writes a progress line to t.progress every interval until stop is
// closed.
func (t *Tally) report(stop <-chan struct{}, interval time.Duration) {
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	told := false
	reported := 0 // the waits already reported
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			t.mu.Lock()
			c := t.counts
			var longest time.Duration
			for _, w := range t.waits[reported:] {
				longest = max(longest, w)
			}
			reported = len(t.waits)
			t.mu.Unlock()
			if c.FirstError != nil && !told {
				fmt.Fprintln(t.progress, "first error:", c.FirstError)
				told = true
			}
			fmt.Fprintf(t.progress, "[%4.1fs] sent=%d ok=%d 429=%d limited=%d cut=%d errors=%d wait_max=%s\n",
				time.Since(start).Seconds(), c.Sent, c.OK, c.TooMany, c.Limited, c.Cut, c.Errors,
				longest.Round(time.Millisecond))
		}
	}
}

// percentile returns the p-th percentile of sorted, by nearest rank, rounded
// to 10µs; 0s when empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted) + 99) / 100 // ceil(p/100 * n), 1-based
	return sorted[max(i, 1)-1].Round(10 * time.Microsecond)
}
