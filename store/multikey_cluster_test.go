//go:build integration

package store_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/redistest"
	"github.com/throttle-go/throttle/store"
)

// TestMultiKeyCluster: on a Redis Cluster the keys of one request must share
// a hash tag; a request whose keys do not is refused before any call, with
// an error that says so, and a store on one server takes it.
func TestMultiKeyCluster(t *testing.T) {
	cl := redistest.SharedCluster(t)
	s, err := store.NewRedis(cl.Client(t))
	require.NoError(t, err)
	assert.True(t, s.Sharded())
	key := uniqueKey(t)
	r := two("", key+"-app", 0)
	_, err = s.Reserve(ctx, key+"-a", r)
	require.ErrorIs(t, err, store.ErrInvalidRequest)
	assert.Contains(t, err.Error(), "hash tag")
	assert.False(t, errors.Is(err, redis.Nil))

	k := tagged(key, "a", "app")
	res, err := s.Reserve(ctx, k[0], two(k[0], k[1], 0))
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, "throttle:{"+key+"}app", s.RedisKey(k[1]), "a key with its own tag is named as it is")

	one, err := store.NewRedis(redistest.Shared(t).Client(t))
	require.NoError(t, err)
	assert.False(t, one.Sharded())
	res, err = one.Reserve(ctx, key+"-a", r)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "one server needs no shared tag")
}
