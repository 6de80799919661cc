package examplekit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle/internal/examplekit"
	"github.com/throttle-go/throttle/throttletest"
)

func TestParseAlgorithm(t *testing.T) {
	t.Parallel()
	a, err := examplekit.ParseAlgorithm("gcra")
	require.NoError(t, err)
	require.Equal(t, throttletest.GCRA, a)
	_, err = examplekit.ParseAlgorithm("leaky")
	require.Error(t, err)
}
