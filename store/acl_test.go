package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
	"github.com/throttle-go/throttle/store/internal/redisstore"
)

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// userClient is a client of srv that authenticates as user.
func userClient(t *testing.T, srv *redistest.Server, user, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: password})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// setUser creates an ACL user with the rule of prefix and password pw.
func setUser(t *testing.T, admin *redis.Client, user, pw, prefix string, extra ...string) {
	rule := append(strings.Fields(store.ACLRule(prefix)), extra...)
	require.NoError(t, admin.Do(ctx, append([]any{"acl", "setuser", user, "reset", "on", ">" + pw}, toAny(rule)...)...).Err())
}

// TestACLRule: a user limited to exactly ACLRule can do everything the store
// does (reserve, cancel and feedback under every algorithm, the repair of a
// key in a wrong state, the eviction check through INFO), and nothing
// outside its prefix.
func TestACLRule(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "noeviction")
	admin := srv.Client(t)
	for _, prefix := range []string{redisstore.DefaultPrefix, "app*1:"} {
		t.Run(prefix, func(t *testing.T) {
			setUser(t, admin, "throttle", "s3cret", prefix)
			c := userClient(t, srv, "throttle", "s3cret")
			s, err := redisstore.NewRedis(c, redisstore.WithPrefix(prefix))
			require.NoError(t, err)
			for _, alg := range []contract.Algorithm{contract.SlidingLog, contract.FixedWindow, contract.SlidingCounter, contract.Buckets} {
				key := uniqueKey(t)
				limits := []contract.Limit{lim(2, time.Minute), lim(5, time.Hour)}
				if alg == contract.Buckets {
					limits = []contract.Limit{prec(2, time.Minute, time.Second)}
				}
				r := algReq(alg, 1, time.Hour, limits...)
				for range 3 {
					res := reserve(t, s, key, r)
					require.True(t, res.Allowed)
					require.NoError(t, s.Cancel(ctx, res), alg)
				}
				for range 3 {
					require.True(t, reserve(t, s, key, r).Allowed)
				}
				require.NoError(t, s.Pause(ctx, key, time.Millisecond))
				require.NoError(t, s.Learn(ctx, key, contract.Learned{Limit: lim(1, time.Second), LimitTTL: time.Minute, Remaining: 5, Reset: time.Minute}))
				reserve(t, s, key, r)
				// A key in a wrong state is repaired (TYPE, DEL); a log
				// repaired away is taken as full (GET), so it waits an hour.
				require.NoError(t, admin.Set(ctx, s.RedisKeyFor(key, alg), "x", 0).Err())
				assert.Equal(t, alg != contract.SlidingLog, reserve(t, s, key, r).Allowed, alg)
			}
			// A paced limit beside a window limit (GET, SET), and Usage.
			key := uniqueKey(t)
			paced := contract.Request{Limits: []contract.Limit{lim(5, time.Minute), {N: 10, Per: time.Second, Paced: true, Burst: 1}}, Cost: 1, MaxWait: time.Hour}
			for range 3 {
				res := reserve(t, s, key, paced)
				require.True(t, res.Allowed)
				require.NoError(t, s.Cancel(ctx, res))
			}
			_, err = s.Usage(ctx, key, req(1, 0, lim(5, time.Minute)))
			require.NoError(t, err)

			// Trim and TTL: a log long enough to trim.
			key = uniqueKey(t)
			for range 200 {
				reserve(t, s, key, req(1, 0, lim(20, time.Millisecond)))
			}
			// A bad entry is repaired (LRANGE, LREM).
			require.NoError(t, admin.RPush(ctx, s.RedisKey(key), "x").Err())
			reserve(t, s, key, req(1, 0, lim(20, time.Millisecond)))

			// Nothing else.
			err = c.Set(ctx, "other", "x", 0).Err()
			assert.ErrorContains(t, err, "NOPERM")
			err = c.LPush(ctx, prefix+"{k}", "x").Err()
			assert.ErrorContains(t, err, "NOPERM")
			err = c.Eval(ctx, "return redis.call('SET', KEYS[1], 'x')", []string{"other"}).Err()
			assert.Error(t, err, "scripts are held to the same keys")
		})
	}
}

// TestWrongPassword: a server with requirepass answers a wrong password with
// WRONGPASS at once: the store's error names it, and does not contain the
// password.
func TestWrongPassword(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "right-horse-battery")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "wrong-staple"})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.NewRedis(c)
	require.NoError(t, err)
	start := time.Now()
	_, err = s.Reserve(ctx, uniqueKey(t), req(1, 0, lim(1, time.Second)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WRONGPASS")
	assert.NotContains(t, err.Error(), "wrong-staple")
	assert.NotContains(t, err.Error(), "right-horse-battery")
	t.Logf("%v after %s", err, time.Since(start))

	// No password at all: NOAUTH.
	s, err = redisstore.NewRedis(srv.Client(t))
	require.NoError(t, err)
	_, err = s.Reserve(ctx, uniqueKey(t), req(1, 0, lim(1, time.Second)))
	assert.ErrorContains(t, err, "NOAUTH")

	ok := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "right-horse-battery"})
	t.Cleanup(func() { _ = ok.Close() })
	s, err = redisstore.NewRedis(ok)
	require.NoError(t, err)
	assert.True(t, reserve(t, s, uniqueKey(t), req(1, 0, lim(1, time.Second))).Allowed)
}
