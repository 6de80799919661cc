package throttle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/throttle-go/throttle"
)

// TestLimitConstructors checks the readable constructors.
func TestLimitConstructors(t *testing.T) {
	t.Parallel()
	assert.Equal(t, throttle.Limit{N: 10, Per: time.Second}, throttle.PerSecond(10))
	assert.Equal(t, throttle.Limit{N: 60, Per: time.Minute}, throttle.PerMinute(60))
	assert.Equal(t, throttle.Limit{N: 5000, Per: time.Hour}, throttle.PerHour(5000))
	assert.Equal(t, throttle.Limit{N: 3, Per: 250 * time.Millisecond}, throttle.Per(3, 250*time.Millisecond))
	assert.Equal(t, "5000/1h0m0s", throttle.PerHour(5000).String())
}
