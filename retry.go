package throttle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// maxRetries bounds Rule.Retries.
const maxRetries = 10

// maxRetryBody is the most of a throttled response's body kept in memory so
// that the caller can still be given that response when a retry fails; a
// longer body is not retried.
const maxRetryBody = 64 << 10

// retries reports whether a response to req, of which listen heard h, may
// be retried under r: a refusal of a request that can be sent again.
func (r *rule) retries(req *http.Request, h heard) bool {
	return r.Retries > 0 && h.refused && replayable(req)
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

// retry sends copies of req again, after the server's wait or a backoff,
// whichever is longer, until a response is not throttled or the retries run
// out; the caller gets the last response. Each attempt reserves its own slot
// (and so waits for a fleet-wide pause there). Bounded by the context,
// MaxServerWait, MaxWait and Retries; the discarded responses' bodies are
// closed.
func (t *Transport) retry(ctx context.Context, r *rule, k keyed, req *http.Request, resp *http.Response, h heard) (*http.Response, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = r.maxServerWait
	b.MaxElapsedTime = 0 // bounded by Retries, MaxServerWait and ctx instead
	b.Reset()
	for n := 1; n <= r.Retries && h.refused; n++ {
		wait := max(b.NextBackOff(), h.pause)
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
		if h.held {
			wait -= h.pause
		}
		if err := t.eng.Sleep(ctx, wait); err != nil {
			return kept, nil
		}
		next, err := cloneForRetry(req)
		if err != nil {
			return kept, nil
		}
		again, heard, err := t.attempt(ctx, r, k, n, next)
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
		resp, h = again, heard
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
	if resp.Body == nil {
		resp.Body = http.NoBody // a base may leave it nil; the retry closes it
	}
	if resp.Body == http.NoBody {
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

// cloneForRetry returns a copy of req with a fresh body from GetBody; req
// itself is never modified.
func cloneForRetry(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}
