package profiles

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
)

// awsRefusals are AWS's throttling errors: an error code, not a status,
// in an XML (Query and EC2 protocols) or JSON body (__type, code) of a 400,
// or in its x-amzn-ErrorType header; some services answer 429 (heard
// without saying) or, S3, 503 SlowDown.
var awsRefusals = func() []throttle.Refusal {
	var out []throttle.Refusal
	for _, code := range []string{"RequestLimitExceeded", "ThrottlingException", "Throttling", "TooManyRequestsException",
		"ProvisionedThroughputExceededException", "RequestThrottled", "RequestThrottledException"} {
		out = append(out,
			throttle.Refusal{Status: 400, Body: code},
			throttle.Refusal{Status: 400, Header: "X-Amzn-Errortype", Value: code})
	}
	return append(out, throttle.Refusal{Status: 503, Body: "SlowDown"})
}()

// AWS returns the rule of AWS's APIs (*.amazonaws.com) for an account's
// actions: a token bucket of bucket requests refilled refillPerSecond per
// second, per action, account and Region, as AWS throttles (sent as a
// paced limit whose burst is the bucket). The account is the access key of
// the request's Signature Version 4 credential (an account with several
// keys has a bucket per key here); the Region and service are its
// credential scope's; the action is X-Amz-Target (JSON protocols), else
// the Action of the query or of a form body read through GetBody (Query
// and EC2 protocols); a request of neither (REST protocols) is keyed by
// its account, Region and service alone, a stricter count. The sizes
// depend on the service and the action: EC2's DescribeHosts, a
// non-mutating action, has a bucket of 100 refilled 20 per second. A 400
// whose error code is RequestLimitExceeded, ThrottlingException,
// Throttling, TooManyRequestsException (or another of AWS's throttling
// codes), in the body or x-amzn-ErrorType, is a refusal. Documented at
// docs.aws.amazon.com, "Request throttling for the Amazon EC2 API" and the
// services' "Common errors", as of 2026-11.
func AWS(bucket, refillPerSecond int) throttle.Rule {
	refill := max(refillPerSecond, 1)
	return throttle.Rule{
		Name:    "aws",
		Host:    "*.amazonaws.com",
		Key:     awsKey,
		Limits:  []throttle.Limit{throttle.Paced(bucket, time.Duration(bucket)*time.Second/time.Duration(refill), bucket-1)},
		Refused: awsRefusals,
	}
}

// errNoAWSCredential is awsKey's reason for a request it cannot key.
var errNoAWSCredential = errors.New("no AWS Signature Version 4 credential (Authorization or X-Amz-Credential)")

// maxFormBody bounds what awsKey reads of a form body to find its Action.
const maxFormBody = 64 << 10

// awsKey keys a request by its access key (hashed), Region, service and
// action.
func awsKey(r *http.Request) (string, error) {
	cred := ""
	if v := r.Header.Get("Authorization"); strings.HasPrefix(v, "AWS4-") {
		_, rest, _ := strings.Cut(v, "Credential=")
		cred, _, _ = strings.Cut(rest, ",")
	} else {
		cred = r.URL.Query().Get("X-Amz-Credential") // a presigned URL
	}
	// access key / date / Region / service / aws4_request
	parts := strings.Split(strings.TrimSpace(cred), "/")
	if len(parts) != 5 || parts[0] == "" {
		return "", errNoAWSCredential
	}
	k := hashKey("aws:", parts[0]) + ":" + parts[2] + ":" + parts[3]
	if a := awsAction(r); a != "" {
		k += ":" + a
	}
	return k, nil
}

// awsAction returns the action of r: X-Amz-Target, else the Action of its
// query or of its form body, "" if none.
func awsAction(r *http.Request) string {
	if t := r.Header.Get("X-Amz-Target"); t != "" {
		return t
	}
	if a := r.URL.Query().Get("Action"); a != "" {
		return a
	}
	if r.GetBody == nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return ""
	}
	body, err := r.GetBody()
	if err != nil {
		return ""
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxFormBody))
	if err != nil {
		return ""
	}
	q, err := url.ParseQuery(string(b))
	if err != nil {
		return ""
	}
	return q.Get("Action")
}
