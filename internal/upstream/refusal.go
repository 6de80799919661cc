package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// This file tells a refusal from an ordinary response: a 429, a 503 with
// Retry-After, or what a rule describes (Match): a status, a header, an
// error code in the body. The body is read without being consumed: a
// bounded prefix is peeked, and the caller is given a body that yields the
// same bytes, then the same end or error, and closes the original.

// PeekLimit is how much of a response's body is read for a Match's Body: an
// error code comes early in the small bodies APIs refuse with.
const PeekLimit = 4 << 10

// maxBodyWord bounds a Match's Body.
const maxBodyWord = 256

// Match describes a response: every field set must match it, and at least
// one is set.
type Match struct {
	// Status, if not zero, is the response's status code.
	Status int
	// Header, if set, is present in the response, and if Value is set,
	// one of its values is Value (spaces trimmed, case ignored).
	Header string
	Value  string
	// Body, if set, appears in the first PeekLimit bytes of the body as
	// a whole word or phrase: not next to a letter, digit or underscore.
	Body string
}

// Check reports what makes m unusable, naming its fields.
func (m Match) Check() error {
	switch {
	case m == Match{}:
		return errors.New("says nothing: set Status, Header or Body")
	case m.Status != 0 && (m.Status < 100 || m.Status > 599):
		return fmt.Errorf("status %d is outside 100..599", m.Status)
	case m.Value != "" && m.Header == "":
		return errors.New("a Value without Header")
	case m.Header != "" && !isToken(m.Header):
		return fmt.Errorf("%q is not a header name", m.Header)
	case m.Body != "" && (strings.TrimSpace(m.Body) != m.Body || len(m.Body) > maxBodyWord):
		return fmt.Errorf("the Body %q must be a word or phrase of at most %d bytes, without spaces around it", m.Body, maxBodyWord)
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110), as header names are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// Read reads resp, received at now: whether it is a refusal (Said.Refused)
// and what its headers say. When a Match needs the body, resp.Body is
// replaced by one that yields the same bytes and closes the original.
func (d *Dialect) Read(resp *http.Response, now time.Time) Said {
	s := ReadHeaders(resp.Header, now)
	s.Refused = d.refused(resp)
	return s
}

// refused reports whether resp is a refusal: a 429 or a 503 with
// Retry-After, or a response one of refusals describes, unless one of
// notRefused describes it.
func (d *Dialect) refused(resp *http.Response) bool {
	var p peek
	yes := resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != ""
	if !yes {
		yes = p.any(resp, d.refusals)
	}
	return yes && !p.any(resp, d.notRefusals)
}

// peek is the prefix of one response's body, read once when a Match first
// needs it.
type peek struct {
	prefix []byte
	read   bool
}

// any reports whether one of ms describes resp.
func (p *peek) any(resp *http.Response, ms []Match) bool {
	for i := range ms {
		if p.match(resp, &ms[i]) {
			return true
		}
	}
	return false
}

func (p *peek) match(resp *http.Response, m *Match) bool {
	if m.Status != 0 && resp.StatusCode != m.Status {
		return false
	}
	if m.Header != "" {
		vs := resp.Header.Values(m.Header)
		if len(vs) == 0 {
			return false
		}
		if m.Value != "" && !hasValue(vs, m.Value) {
			return false
		}
	}
	return m.Body == "" || containsWord(p.body(resp), m.Body)
}

func hasValue(vs []string, want string) bool {
	for _, v := range vs {
		if strings.EqualFold(strings.TrimSpace(v), want) {
			return true
		}
	}
	return false
}

// body returns the first PeekLimit bytes of resp's body, reading them the
// first time and giving resp a body that yields them again.
func (p *peek) body(resp *http.Response) []byte {
	if p.read {
		return p.prefix
	}
	p.read = true
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode < 200 ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return nil
	}
	buf := make([]byte, PeekLimit)
	n, err := io.ReadFull(resp.Body, buf)
	p.prefix = buf[:n]
	r := &replay{prefix: bytes.NewReader(p.prefix), orig: resp.Body}
	switch err {
	case nil:
		r.rest = resp.Body
	case io.EOF, io.ErrUnexpectedEOF:
		r.err = io.EOF // the body ended within the prefix
	default:
		r.err = err
	}
	resp.Body = r
	return p.prefix
}

// replay yields a peeked prefix, then what followed it: the rest of the
// original body, or the end or the error the peek met. Close closes the
// original. It has no other method (no WriteTo, no Seek), so that io.Copy
// reads it through Read.
type replay struct {
	prefix *bytes.Reader
	rest   io.Reader // the original, when the prefix did not reach its end
	err    error     // else how it ended
	orig   io.ReadCloser
}

func (r *replay) Read(b []byte) (int, error) {
	if r.prefix.Len() > 0 {
		return r.prefix.Read(b)
	}
	if r.rest != nil {
		return r.rest.Read(b)
	}
	return 0, r.err
}

func (r *replay) Close() error { return r.orig.Close() }

// containsWord reports whether word appears in b with no letter, digit or
// underscore on either side.
func containsWord(b []byte, word string) bool {
	w := []byte(word)
	if len(w) == 0 {
		return false
	}
	for i := 0; i < len(b); {
		j := bytes.Index(b[i:], w)
		if j < 0 {
			return false
		}
		at := i + j
		end := at + len(w)
		if (at == 0 || !isWordByte(b[at-1])) && (end == len(b) || !isWordByte(b[end])) {
			return true
		}
		i = at + 1
	}
	return false
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
