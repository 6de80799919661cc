package throttle

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMemberScanner(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"plain", `{"a":1,"usage":{"total_tokens":5}}`, []string{`{"total_tokens":5}`}},
		{"spaces and nesting", "{\"usage\" :\n { \"x\": {\"y\": \"}\"}, \"n\": 2 } }", []string{`{ "x": {"y": "}"}, "n": 2 }`}},
		{"null, then an object", `{"usage":null} {"usage":{"n":1}}`, []string{`{"n":1}`}},
		{"escaped, inside a string", `{"c":"\"usage\":{\"n\":9}","usage":{"n":1}}`, []string{`{"n":1}`}},
		{"another name ending alike", `{"xusage":{"n":9},"usage":{"n":1}}`, []string{`{"n":1}`}},
		{"repeated quotes", `{"""usage":{"n":1}}`, []string{`{"n":1}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, step := range []int{1, 2, 7, len(tc.in)} {
				s := newMemberScanner("usage")
				var got []string
				for i := 0; i < len(tc.in); i += step {
					for _, v := range s.feed([]byte(tc.in[i:min(i+step, len(tc.in))])) {
						got = append(got, string(v))
					}
				}
				assert.Equal(t, tc.want, got, "fed %d bytes at a time", step)
			}
		})
	}
}
