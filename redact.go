package throttle

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
)

// RedactURLError returns err with the URL of the *url.Error it holds
// redacted: every value of the query string and the userinfo's password
// become "REDACTED" (the keys and the path stay). http.Client.Do wraps every
// error of a transport, throttle's refusals included, in a *url.Error that
// quotes the whole request URL, so a token in the query string reaches any
// log that prints the error; throttle's own errors, decisions and logs never
// hold a URL. Use it before logging: log.Print(throttle.RedactURLError(err)).
//
// err itself is not changed. When err is the *url.Error, the result is a
// copy with the URL redacted; when err wraps one (fmt.Errorf), the result
// has err's text redacted and unwraps to err, so errors.Is and errors.As
// see what err holds (the *url.Error found that way keeps its URL). A token
// in the path is not redacted. err without a *url.Error, and nil, are
// returned as they are.
func RedactURLError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	red := redactURL(ue.URL)
	if red == ue.URL {
		return err
	}
	if err == error(ue) {
		return &url.Error{Op: ue.Op, URL: red, Err: ue.Err}
	}
	msg := strings.ReplaceAll(err.Error(), strconv.Quote(ue.URL), strconv.Quote(red))
	return &redactedError{msg: strings.ReplaceAll(msg, ue.URL, red), err: err}
}

// redactURL replaces every query value and the password of raw.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		base, _, _ := strings.Cut(raw, "?")
		if i := strings.Index(base, "@"); i >= 0 {
			base = base[i+1:]
		}
		return base + "?REDACTED"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
		if len(q) == 0 {
			u.RawQuery = "REDACTED"
		}
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// redactedError is an error whose text was redacted; it unwraps to the
// original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
