package throttle

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"

	"github.com/throttle-go/throttle/internal/engine"
)

// wire is a request's admission while the base transport has it: the slot
// it is sent on, which a retake on the wire may change, and the trace that
// watches it (one allocation for both).
type wire struct {
	t       *Transport
	ctx     context.Context
	r       *rule
	k       keyed
	attempt int
	trace   httptrace.ClientTrace

	// writer is ctx for the check on the goroutine that writes the
	// request (header), ended when the base returns: a connection that
	// broke while that check waited for a new slot lets it go.
	writer context.Context
	stop   context.CancelFunc

	mu       sync.Mutex
	a        engine.Admission
	got      bool           // the base reported the connection
	wrote    bool           // written on it (written, which reports its Decision)
	head     bool           // the first header field was written (header)
	onWrite  bool           // the admission was checked as its request was written (header)
	headers  bool           // the write's lateness was measured as its header fields went (wroteHeaders)
	returned bool           // the base returned (sent): no check starts after
	reported sync.Once      // the Decision's report
	checked  sync.WaitGroup // until the check of the connection is done
}

// onWire returns req with a trace that checks its lateness when the base
// transport has the connection to write it on (a dial, a TLS handshake or a
// wait for a full pool count): the part of the lateness no wake-up sees
// (engine.Wired). The returned wire holds the admission, a, as it goes on,
// and reports its Decision (of the attempt-th send) once the request is
// written, so that no hook, log or stat runs between the check and the
// write; it is nil when a is not measured (then req is returned as it is).
// req itself is not modified.
// (The trace cannot be pooled: net/http reads it until the response's body
// is closed.)
func (t *Transport) onWire(ctx context.Context, req *http.Request, r *rule, k keyed, attempt int, a engine.Admission) (*http.Request, *wire) {
	if !a.Measured() {
		return req, nil
	}
	w := &wire{t: t, ctx: ctx, r: r, k: k, attempt: attempt, a: a}
	w.writer, w.stop = context.WithCancel(ctx)
	w.trace.GotConn = w.gotConn
	w.trace.WroteHeaderField = w.header
	w.trace.WroteHeaders = w.wroteHeaders
	w.trace.WroteRequest = w.written
	return req.WithContext(httptrace.WithClientTrace(req.Context(), &w.trace)), w
}

// gotConn is the trace's GotConn: the admission checks the connection (and
// retakes its slot when late) before the request is written. net/http
// writes a request again on a new connection when the one it had was
// closed, after a failed write or, for an idempotent request, before any
// byte of the response (HTTP/2 likewise, on a refused stream), and reports
// each connection: the request is checked again on each, for the dial is
// lateness too.
func (w *wire) gotConn(httptrace.GotConnInfo) {
	w.mu.Lock()
	wrote := w.wrote
	w.mu.Unlock()
	if wrote {
		// Written once already: its Decision, which written may have
		// left to a goroutine, is reported before a new check starts.
		w.report()
	}
	w.mu.Lock()
	if w.returned {
		w.mu.Unlock()
		return
	}
	w.got, w.wrote, w.head, w.onWrite, w.headers = true, false, false, false, false
	a := w.a
	w.checked.Add(1)
	w.mu.Unlock()
	defer w.checked.Done()
	w.t.eng.Wired(w.ctx, &a) // internal/engine: the wired state, and a retake's
	w.mu.Lock()
	w.a = a
	w.mu.Unlock()
}

// header is the trace's WroteHeaderField. net/http's HTTP/1 transport
// writes "Host" first, on the goroutine that then flushes the request to the
// connection, and the check of the connection (gotConn) ran before the
// request was handed to that goroutine: on a busy machine the handoff alone
// may outlast the allowance. So an HTTP/1 request is checked again here, the
// last point before its bytes leave, and retakes its slot when late, holding
// the connection, which serves it alone. HTTP/2 writes pseudo-header fields
// first, under a lock the connection's other streams share: nothing waits
// there.
func (w *wire) header(key string, _ []string) {
	w.mu.Lock()
	if w.head || !w.got || w.returned {
		w.mu.Unlock()
		return
	}
	w.head = true
	if key != "Host" {
		w.mu.Unlock()
		return
	}
	w.onWrite = true
	a := w.a
	w.checked.Add(1)
	w.mu.Unlock()
	defer w.checked.Done()
	w.t.eng.Wired(w.writer, &a)
	w.mu.Lock()
	w.a = a
	w.mu.Unlock()
}

// wroteHeaders is the trace's WroteHeaders: over HTTP/2, how late the
// request was written counts in the process's lateness (engine.Written) once
// its header fields went, which is when the upstream counts it: its body's
// upload, which WroteRequest waits for, is no lateness. An HTTP/1 request
// was measured as it was written (header).
func (w *wire) wroteHeaders() {
	w.mu.Lock()
	if w.onWrite || w.headers || !w.got || w.returned {
		w.mu.Unlock()
		return
	}
	w.headers = true
	a := w.a
	w.mu.Unlock()
	w.t.eng.Written(&a)
}

// written is the trace's WroteRequest: how late the request was written
// counts in the process's lateness (engine.Written; measured already when
// checked as it was written, or as its header fields went), then its
// Decision is reported. net/http's HTTP/1 transport flushes the request to
// its connection only after WroteRequest returns, on the same goroutine:
// there the Decision is reported on a goroutine of its own, so that no hook
// holds the bytes.
func (w *wire) written(info httptrace.WroteRequestInfo) {
	w.checked.Wait()
	w.mu.Lock()
	if info.Err != nil {
		// Not written: net/http may write it again on a new connection
		// (gotConn), or return the error (sent reports).
		w.mu.Unlock()
		return
	}
	w.wrote = true
	a, measured, headers := w.a, w.onWrite, w.headers
	w.mu.Unlock()
	if measured {
		go w.report() // HTTP/1 (header): sent() waits for it
		return
	}
	if !headers {
		w.t.eng.Written(&a)
	}
	w.report()
}

// report reports the Decision of the wire's admission, once: when the
// request was written (the trace's WroteRequest), or when the base returned.
// A second caller returns once the first has reported.
func (w *wire) report() {
	w.reported.Do(func() {
		w.checked.Wait()
		w.mu.Lock()
		a := w.a
		w.mu.Unlock()
		w.t.observe(w.ctx, w.r.stats, w.decision(&a))
	})
}

// sent returns the admission a request went with: as admitted, or as a
// retake on the wire left it, and reports its Decision if the write did not.
// A base that answered (ok) without reporting the connection cannot be
// watched on the wire: the engine is no longer guarded.
func (w *wire) sent(ok bool) engine.Admission {
	w.stop()
	w.mu.Lock()
	w.returned = true
	w.mu.Unlock()
	w.checked.Wait()
	w.mu.Lock()
	got, a := w.got, w.a
	w.mu.Unlock()
	if !got && ok {
		w.t.eng.Unguard()
	}
	w.report()
	return a
}

// decision is the Decision of a, the wire's admission.
func (w *wire) decision(a *engine.Admission) Decision {
	d := w.r.decision(w.k, &a.Verdict)
	d.Attempt = w.attempt
	return d
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
