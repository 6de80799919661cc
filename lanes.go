package throttle

import (
	"fmt"
	"net/http"

	"github.com/throttle-go/throttle/internal/contract"
)

// Priority lanes (docs/lanes.md): Rule.Lanes and Rule.Lane. A request of a
// higher lane takes the slot a waiting request of a lower lane holds, when
// it is earlier than its own; the waiter finds out when it wakes and goes
// one slot later, in its turn.

// maxLanes bounds Rule.Lanes.
const maxLanes = contract.MaxLane + 1

// compileLanes checks Lanes and Lane, and sets the plan's lanes.
func (c *rule) compileLanes() error {
	switch {
	case c.Lanes == 0 && c.Lane == nil:
		return nil
	case c.Lanes < 2 || c.Lanes > maxLanes:
		return c.fail("Lanes %d: must be 2 to %d (or 0 with no Lane)", c.Lanes, maxLanes)
	case c.Lane == nil:
		return c.fail("Lanes is set but Lane is nil: nothing says a request's lane")
	case c.Algorithm != SlidingLog:
		return c.fail("Lanes needs the SlidingLog algorithm")
	case c.also != nil || c.units != nil:
		return c.fail("Lanes cannot be combined with Also or a limit of a unit")
	case c.InFlight > 0:
		return c.fail("Lanes cannot be combined with InFlight")
	}
	c.plan.Lanes = c.Lanes
	return nil
}

// lane returns req's lane under c: 0 without lanes.
func (c *rule) lane(req *http.Request) (int, error) {
	if c.plan.Lanes < 2 {
		return 0, nil
	}
	n := c.Lane(req)
	if n < 0 || n >= c.plan.Lanes {
		return 0, fmt.Errorf("throttle: rule %q: lane %d is outside 0..%d", c.Name, n, c.plan.Lanes-1)
	}
	return n, nil
}
