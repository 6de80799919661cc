package throttle_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/fakestore"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/profiles"
	"github.com/throttle-go/throttle/store"
)

// settleCount is a store that counts its settlements.
type settleCount struct {
	store.Store
	n      atomic.Int32
	actual [][]int64
	mu     sync.Mutex
}

func (s *settleCount) Settle(ctx context.Context, res contract.Reservation, actual []int64) error {
	s.n.Add(1)
	s.mu.Lock()
	s.actual = append(s.actual, actual)
	s.mu.Unlock()
	return s.Store.Settle(ctx, res, actual)
}

// llmRule counts 100 requests and 1,000 tokens a minute, a request
// estimating the tokens its X-Est header says, settled from OpenAI's usage.
func llmRule() throttle.Rule {
	return throttle.Rule{
		Host: "api.example.com", Key: throttle.Fixed("k"), FailFast: true, NoDefaultPace: true,
		Limits: []throttle.Limit{throttle.PerMinute(100), throttle.PerMinute(1000).Of("tokens")},
		Costs: map[string]func(*http.Request) int{"tokens": func(r *http.Request) int {
			n, _ := strconv.Atoi(r.Header.Get("X-Est"))
			return n
		}},
		Actual: profiles.OpenAIUsage("tokens"),
	}
}

// llmUpstream answers every request with body, as an event stream when stream.
func llmUpstream(body string, stream bool, read func(io.Reader) io.Reader) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp := okResponse(r)
		if stream {
			resp.Header.Set("Content-Type", "text/event-stream")
		} else {
			resp.Header.Set("Content-Type", "application/json")
		}
		resp.Body = io.NopCloser(read(strings.NewReader(body)))
		return resp, nil
	})
}

func est(t *testing.T, c *http.Client, n int) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/chat/completions", nil)
	require.NoError(t, err)
	req.Header.Set("X-Est", strconv.Itoa(n))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	return resp.Body.Close()
}

const jsonBody = `{"id":"x","choices":[{"message":{"content":"the \"usage\": {\"total_tokens\": 1}"}}],` +
	`"usage":{"prompt_tokens":60,"completion_tokens":40,"total_tokens":100}}`

func TestSettleRefundFromJSONBody(t *testing.T) {
	st := &settleCount{Store: newMemory(t)}
	tr, err := throttle.New(llmUpstream(jsonBody, false, func(r io.Reader) io.Reader { return r }), st, throttle.WithRule(llmRule()))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	require.NoError(t, est(t, c, 800))
	assert.Equal(t, int32(1), st.n.Load())
	assert.Equal(t, [][]int64{{100}}, st.actual, "total_tokens, not the escaped text in the content")
	// 100 + 800 fit in 1,000: the refund gave 700 back.
	require.NoError(t, est(t, c, 800))
	assert.ErrorIs(t, est(t, c, 801), throttle.ErrLimited, "100 + 100 settled: 801 does not fit")
	assert.Equal(t, int32(2), st.n.Load())
}

func TestSettleStreamReadInSmallChunks(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":290,\"total_tokens\":300}}\n\n" +
		"data: [DONE]\n\n"
	st := &settleCount{Store: newMemory(t)}
	tr, err := throttle.New(llmUpstream(stream, true, iotest.OneByteReader), st, throttle.WithRule(llmRule()))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/chat/completions", nil)
	require.NoError(t, err)
	req.Header.Set("X-Est", "900")
	resp, err := c.Do(req)
	require.NoError(t, err)
	var got bytes.Buffer
	buf := make([]byte, 3)
	for {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, stream, got.String(), "the caller's bytes, unchanged")
	assert.Equal(t, int32(1), st.n.Load(), "settled once")
	assert.Equal(t, [][]int64{{300}}, st.actual)
	require.NoError(t, est(t, c, 700), "300 + 700")
	assert.ErrorIs(t, est(t, c, 401), throttle.ErrLimited, "300 + 300 settled")
}

func TestSettleNothingWhenClosedEarly(t *testing.T) {
	stream := "data: {\"usage\":null}\n\n" + strings.Repeat("data: {\"choices\":[]}\n\n", 50) +
		"data: {\"usage\":{\"total_tokens\":10}}\n\n"
	st := &settleCount{Store: newMemory(t)}
	tr, err := throttle.New(llmUpstream(stream, true, func(r io.Reader) io.Reader { return r }), st, throttle.WithRule(llmRule()))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	req, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/chat/completions", nil)
	require.NoError(t, err)
	req.Header.Set("X-Est", "600")
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, err = resp.Body.Read(make([]byte, 64))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, int32(0), st.n.Load())
	assert.ErrorIs(t, est(t, c, 600), throttle.ErrLimited, "the estimate of 600 stands")
}

func TestSettleFailingStoreIsReported(t *testing.T) {
	fs := fakestore.New()
	fs.FailSettle(errors.New("connection reset"))
	var mu sync.Mutex
	var heard []throttle.Feedback
	tr, err := throttle.New(llmUpstream(jsonBody, false, func(r io.Reader) io.Reader { return r }), fs, throttle.WithRule(llmRule()),
		throttle.WithOnFeedback(func(f throttle.Feedback) { mu.Lock(); heard = append(heard, f); mu.Unlock() }))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	require.NoError(t, est(t, c, 800), "the caller reads its body whatever the settlement")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, heard, 1)
	var se *throttle.StoreError
	assert.ErrorAs(t, heard[0].Err, &se)
	assert.ErrorIs(t, heard[0].Err, throttle.ErrStoreUnavailable)
	assert.ErrorIs(t, est(t, c, 800), throttle.ErrLimited, "the estimate stands")
}

func TestUnitsConfig(t *testing.T) {
	base := llmUpstream(jsonBody, false, func(r io.Reader) io.Reader { return r })
	for _, tc := range []struct {
		name string
		edit func(*throttle.Rule)
		want string
	}{
		{"no estimate", func(r *throttle.Rule) { r.Costs = nil }, "no estimate"},
		{"estimate of an unknown unit", func(r *throttle.Rule) {
			r.Costs["points"] = func(*http.Request) int { return 1 }
		}, "no limit counts that unit"},
		{"costs without units", func(r *throttle.Rule) { r.Limits = r.Limits[:1] }, "no limit counts a unit"},
		{"two paced limits of a unit", func(r *throttle.Rule) {
			r.Limits = append(r.Limits, throttle.Paced(10, 1e9, 9).Of("tokens"), throttle.Paced(20, 1e9, 9).Of("tokens"))
		}, "one paced limit"},
		{"a counting algorithm", func(r *throttle.Rule) { r.Algorithm = throttle.FixedWindow }, "SlidingLog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := llmRule()
			r.Costs = map[string]func(*http.Request) int{"tokens": r.Costs["tokens"]}
			tc.edit(&r)
			_, err := throttle.New(base, newMemory(t), throttle.WithRule(r))
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	tr, err := throttle.New(base, newMemory(t), throttle.WithRule(llmRule()))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	assert.ErrorIs(t, est(t, c, 1001), throttle.ErrInvalidCost)
	assert.ErrorIs(t, est(t, c, -1), throttle.ErrInvalidCost)
}

// Actual.Status counts a unit only on the responses whose status it
// names: a budget of invalid responses (401, 403, 429) estimated at 0 and
// settled to 1 on such a response, with no store call for the others. A
// request waits once the budget's window holds more than its N.
func TestSettleFromStatus(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp := okResponse(r)
		resp.StatusCode = int(status.Load())
		return resp, nil
	})
	st := &settleCount{Store: newMemory(t)}
	tr, err := throttle.New(base, st, throttle.WithRule(throttle.Rule{
		Host: "api.example.com", Key: throttle.Fixed("k"), FailFast: true, NoDefaultPace: true,
		Limits: []throttle.Limit{throttle.PerMinute(100), throttle.PerMinute(2).Of("invalid")},
		Costs:  map[string]func(*http.Request) int{"invalid": func(*http.Request) int { return 0 }},
		Actual: throttle.Actual{Status: func(code int) (map[string]int, bool) {
			if code == 401 || code == 403 {
				return map[string]int{"invalid": 1}, true
			}
			return nil, false
		}},
	}))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	get := func() error {
		resp, err := c.Get("https://api.example.com/x")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	for range 5 {
		require.NoError(t, get())
	}
	assert.Zero(t, st.n.Load(), "a valid response settles nothing")
	status.Store(401)
	for range 3 {
		require.NoError(t, get())
	}
	assert.Equal(t, int32(3), st.n.Load())
	assert.Equal(t, [][]int64{{1}, {1}, {1}}, st.actual)
	status.Store(200)
	assert.ErrorIs(t, get(), throttle.ErrLimited, "3 invalid responses in the minute, more than 2: the key waits")
}

// orgTokens counts, per token, 100 requests a minute, and for the
// organization beside them (Also), 100 requests and 1,000 tokens a minute:
// a request estimates the tokens its X-Est header says, settled from
// OpenAI's usage.
func orgTokens(hashTag bool) throttle.Rule {
	r := llmRule()
	r.Key = throttle.ByBearerToken()
	r.Limits = []throttle.Limit{throttle.PerMinute(100)}
	r.Also = []throttle.KeyLimit{{Name: "org", Key: throttle.Fixed("org"), HashTag: hashTag,
		Limits: []throttle.Limit{throttle.PerMinute(100), throttle.PerMinute(1000).Of("tokens")}}}
	return r
}

// TestAlsoUnits: a unit counted under an Also key is shared by every key
// of the rule: its estimates and settlements from two tokens add up under
// the organization, on every store (the Cluster with the keys in slots of
// their own, and under one hash tag).
func TestAlsoUnits(t *testing.T) {
	prefix := "alsounits" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "") + ":"
	for _, tc := range []struct {
		name    string
		hashTag bool
		open    func(t *testing.T) store.Store
	}{
		{"memory", false, newMemory},
		{"redis-server", false, func(t *testing.T) store.Store {
			st, err := store.NewRedis(redistest.Shared(t).Client(t), store.WithPrefix(prefix+"one:"))
			require.NoError(t, err)
			return st
		}},
		{"redis-cluster, a slot per key", false, func(t *testing.T) store.Store {
			st, err := store.NewRedis(redistest.SharedCluster(t).Client(t), store.WithPrefix(prefix+"spread:"))
			require.NoError(t, err)
			return st
		}},
		{"redis-cluster, one tag", true, func(t *testing.T) store.Store {
			st, err := store.NewRedis(redistest.SharedCluster(t).Client(t), store.WithPrefix(prefix+"tag:"))
			require.NoError(t, err)
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &settleCount{Store: tc.open(t)}
			tr, err := throttle.New(llmUpstream(jsonBody, false, func(r io.Reader) io.Reader { return r }), st,
				throttle.WithRule(orgTokens(tc.hashTag)))
			require.NoError(t, err)
			c := &http.Client{Transport: tr}
			ask := func(token string, n int) error {
				req, err := http.NewRequest(http.MethodPost, "https://api.example.com/v1/chat/completions", nil)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("X-Est", strconv.Itoa(n))
				resp, err := c.Do(req)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				require.NoError(t, err)
				return resp.Body.Close()
			}
			require.NoError(t, ask("a", 800))
			require.NoError(t, ask("b", 800), "a's 800 was settled to 100")
			assert.Equal(t, [][]int64{{100}, {100}}, st.actual)
			var le *throttle.LimitError
			require.ErrorAs(t, ask("c", 801), &le, "100 + 100 under the org: 801 does not fit, whatever the token")
			assert.Equal(t, throttle.PerMinute(1000).Of("tokens"), le.Limit)
			assert.Equal(t, "org", le.Key, "the org's key names the limit")
			require.NoError(t, ask("c", 800))
		})
	}
}

func TestAlsoUnitsConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*throttle.Rule)
		want string
	}{
		{"no estimate", func(r *throttle.Rule) {
			r.Costs = map[string]func(*http.Request) int{"points": func(*http.Request) int { return 1 }}
			r.Also[0].Limits = append(r.Also[0].Limits, throttle.PerMinute(10).Of("points"))
		}, `unit "tokens": no estimate`},
		{"only units under the key", func(r *throttle.Rule) { r.Also[0].Limits = r.Also[0].Limits[1:] }, "no limit of requests"},
		{"a paced unit under the key", func(r *throttle.Rule) {
			r.Also[0].Limits = append(r.Also[0].Limits, throttle.Paced(1000, time.Minute, 999).Of("tokens"))
		}, "window limits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := orgTokens(false)
			tc.edit(&r)
			_, err := throttle.New(nil, newMemory(t), throttle.WithRule(r))
			var ce *throttle.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// Costs and Actual for a unit that only an Also key counts.
	_, err := throttle.New(nil, newMemory(t), throttle.WithRule(orgTokens(false)))
	require.NoError(t, err)
}
