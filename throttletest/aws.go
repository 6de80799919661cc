package throttletest

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// NewAWS returns a fake of an AWS API, counting per account (the access
// key of the request's Signature Version 4 credential, unless Config.Key
// says otherwise), Region and action as AWS documents
// (docs.aws.amazon.com, "Request throttling for the Amazon EC2 API", as of
// 2026-11): a token bucket of N requests refilled at N per Window for each
// action (zero: 100 refilled 20 per second, EC2's DescribeHosts). The
// action is X-Amz-Target, else the Action of the query or of a form body.
// A request the bucket refuses is answered 400 with an error code, not a
// status: for a request with X-Amz-Target (the JSON protocols), a JSON
// body {"__type":"ThrottlingException",…} and x-amzn-ErrorType:
// ThrottlingException; for the others (the Query and EC2 protocols), EC2's
// XML error RequestLimitExceeded. Stats are kept per account, Region and
// action ("key region action").
func NewAWS(cfg Config) (*Upstream, error) {
	if cfg.MaxInFlight != 0 {
		return nil, errInFlight("NewAWS")
	}
	a := &aws{buckets: map[string]*bucket{}}
	u, err := newAPI("NewAWS", cfg, 100, 5*time.Second, awsAccessKey, a)
	if err != nil {
		return nil, err
	}
	if u.cfg.Window/time.Duration(u.cfg.N) <= 0 {
		return nil, errSpacing("NewAWS")
	}
	return u, nil
}

type aws struct {
	buckets map[string]*bucket
}

// awsCredential returns the parts of r's credential scope: access key,
// date, Region, service, "aws4_request"; nil if it has none.
func awsCredential(r *http.Request) []string {
	cred := r.URL.Query().Get("X-Amz-Credential")
	if v := r.Header.Get("Authorization"); strings.HasPrefix(v, "AWS4-") {
		_, rest, _ := strings.Cut(v, "Credential=")
		cred, _, _ = strings.Cut(rest, ",")
	}
	if parts := strings.Split(strings.TrimSpace(cred), "/"); len(parts) == 5 {
		return parts
	}
	return nil
}

// awsAccessKey keys by the credential's access key, "" without one.
func awsAccessKey(r *http.Request) string {
	if c := awsCredential(r); c != nil {
		return c[0]
	}
	return ""
}

func (*aws) readsForm() bool { return true }

// awsAction returns r's action, its form parsed (formReader).
func awsAction(r *http.Request) string {
	if t := r.Header.Get("X-Amz-Target"); t != "" {
		return t
	}
	return r.Form.Get("Action")
}

func (s *aws) answer(u *Upstream, r *http.Request, now time.Time) answer {
	region := ""
	if c := awsCredential(r); c != nil {
		region = c[2]
	}
	key := u.cfg.Key(r) + " " + region + " " + awsAction(r)
	b := s.buckets[key]
	if b == nil {
		b = &bucket{}
		s.buckets[key] = b
	}
	if ok, _ := b.take(now, u.cfg.Window/time.Duration(u.cfg.N), u.cfg.N-1); ok {
		return answer{key: key, verdict: accepted, status: http.StatusOK, body: `{}`}
	}
	h := http.Header{}
	if r.Header.Get("X-Amz-Target") != "" {
		h.Set("X-Amzn-Errortype", "ThrottlingException")
		return answer{key: key, verdict: refused, status: http.StatusBadRequest, header: h,
			body: `{"__type":"com.amazonaws.coral.availability#ThrottlingException","message":"Rate exceeded"}`}
	}
	h.Set("X-Amzn-Requestid", strconv.FormatInt(now.UnixNano(), 36))
	return answer{key: key, verdict: refused, status: http.StatusBadRequest, header: h,
		body: `<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>1</RequestID></Response>`}
}
