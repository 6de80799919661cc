package examplekit_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/examplekit"
)

// TestStartRedisURL: a URL with a password connects, and neither the
// description nor the error of a wrong password holds a password.
func TestStartRedisURL(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	m.RequireAuth("s3cret-pw")

	r, err := examplekit.StartRedis(context.Background(), "redis://:s3cret-pw@"+m.Addr())
	require.NoError(t, err)
	defer r.Close()
	assert.Equal(t, "Redis at redis://"+m.Addr(), r.String())

	_, err = examplekit.StartRedis(context.Background(), "redis://:wrong-pw@"+m.Addr())
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "wrong-pw")
	assert.NotContains(t, err.Error(), "s3cret-pw")

	_, err = examplekit.StartRedis(context.Background(), "redis://:s3cret-pw@"+m.Addr()+"/x%zz")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cret-pw")
}
