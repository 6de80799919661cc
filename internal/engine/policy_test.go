package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/throttle-go/throttle/internal/contract"
)

// TestPacedLocalShare: under FailLocal, a paced limit keeps its spacing's
// share and its burst's, and the largest local cost follows the burst.
func TestPacedLocalShare(t *testing.T) {
	t.Parallel()
	s := shareOf([]contract.Limit{{N: 4000, Per: time.Hour}, {N: 100, Per: time.Second, Paced: true, Burst: 10}}, 0.25)
	assert.Equal(t, []contract.Limit{{N: 1000, Per: time.Hour}, {N: 25, Per: time.Second, Paced: true, Burst: 2}}, s.limits)
	assert.Equal(t, 3, s.minN, "a cost of at most the burst plus one")
}
