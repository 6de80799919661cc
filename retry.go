package throttle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/throttle-go/throttle/store"
)

// MaxRetries bounds Rule.Retries.
const MaxRetries = 10

// maxRetryBody is the most of a throttled response's body kept in memory so
// that the caller can still be given that response when a retry fails; a
// longer body is not retried.
const maxRetryBody = 64 << 10

// attemptKey marks the context of a retry's request with its attempt number,
// so that the inner RoundTrip reports it and does not retry in turn.
type attemptKey struct{}

func attemptOf(ctx context.Context) int {
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}

// send hands req to the base transport, listens to the response, and retries
// a throttled response when the rule allows it.
func (t *Transport) send(ctx context.Context, r *rule, key, skey string, req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	pause, held := t.listen(ctx, r, key, skey, resp)
	if r.Retries == 0 || attemptOf(ctx) > 0 || !throttledStatus(resp) || !replayable(req) {
		return resp, nil
	}
	return t.retry(ctx, r, req, resp, pause, held)
}

// replayable reports whether req may be sent again: an idempotent method, or
// an Idempotency-Key, and a body that GetBody can produce again.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get("Idempotency-Key") == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// retry sends clones of req again, after the server's wait or a backoff,
// whichever is longer, until a response is not throttled or the retries run
// out; the caller gets the last response. Each attempt goes through
// RoundTrip, so it reserves its own slot (and waits for the fleet-wide pause
// there). Bounded by the context, MaxServerWait and Retries; the discarded
// responses' bodies are closed.
func (t *Transport) retry(ctx context.Context, r *rule, req *http.Request, resp *http.Response, pause time.Duration, held bool) (*http.Response, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = r.maxServerWait
	b.MaxElapsedTime = 0 // bounded by Retries, MaxServerWait and ctx instead
	b.Reset()
	for attempt := 1; attempt <= r.Retries; attempt++ {
		wait := max(b.NextBackOff(), pause)
		if wait > min(r.maxServerWait, r.maxWait) || !fitsDeadline(ctx, t.now(), wait) {
			return resp, nil
		}
		kept, ok := keepBody(resp)
		if !ok {
			return resp, nil
		}
		// When the store holds the fleet-wide pause, the attempt's
		// reservation waits for it: sleep only what the backoff asks
		// beyond it.
		sleepFor := wait
		if held {
			sleepFor = wait - pause
		}
		if err := t.sleep(ctx, sleepFor); err != nil {
			return kept, nil
		}
		next, err := cloneForRetry(ctx, req, attempt)
		if err != nil {
			return kept, nil
		}
		again, err := t.RoundTrip(next)
		if err != nil {
			// Refused (a longer pause meanwhile) or cut short: the
			// caller gets the last response, unless its context ended.
			if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
				_ = kept.Body.Close()
				return nil, err
			}
			return kept, nil
		}
		_ = kept.Body.Close()
		resp = again
		if !throttledStatus(resp) {
			return resp, nil
		}
		// The inner RoundTrip listened to it already; what it recorded
		// is in the store, so only the pause it asked for matters here.
		pause = r.learn(parseSignals(resp.Header, t.now()), true).Pause
		_, canHold := t.store.(store.Feedback)
		held = canHold && !r.IgnoreUpstream
	}
	return resp, nil
}

// fitsDeadline reports whether a wait of d ends before ctx's deadline.
func fitsDeadline(ctx context.Context, now time.Time, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || now.Add(d).Before(dl)
}

// keepBody reads resp's body into memory, up to maxRetryBody, so that resp
// can still be returned after a failed retry. A longer body is put back as
// it was (what was read, then the rest) and ok is false.
func keepBody(resp *http.Response) (*http.Response, bool) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return resp, true
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxRetryBody+1))
	if err != nil || len(buf) > maxRetryBody {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), resp.Body), resp.Body}
		return resp, false
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(buf))
	return resp, true
}

// cloneForRetry returns a copy of req for attempt, with a fresh body from
// GetBody; req itself is never modified.
func cloneForRetry(ctx context.Context, req *http.Request, attempt int) (*http.Request, error) {
	next := req.Clone(context.WithValue(ctx, attemptKey{}, attempt))
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}
