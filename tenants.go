package throttle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"

	"github.com/throttle-go/throttle/internal/contract"
)

// Fair shares between tenants (docs/tenants.md): Rule.Tenant and
// Rule.Weights. The waiters of one key are served in start-time fair
// queueing order: backlogged tenants in proportion to their weights, a
// light tenant's request before their backlogs. Each waiter confirms its
// slot when it wakes, and goes one slot later when an earlier turn took it.

// maxWeight bounds a weight of Rule.Weights.
const maxWeight = contract.MaxWeight

// compileTenants checks Tenant and Weights, and sets the plan's tenants.
func (c *rule) compileTenants() error {
	switch {
	case c.Tenant == nil && c.Weights == nil:
		return nil
	case c.Tenant == nil:
		return c.fail("Weights is set but Tenant is nil: nothing says a request's tenant")
	case c.Lanes != 0 || c.Lane != nil:
		return c.fail("Tenant cannot be combined with Lanes (yet)")
	case c.Algorithm != SlidingLog:
		return c.fail("Tenant needs the SlidingLog algorithm")
	case c.also != nil || c.units != nil:
		return c.fail("Tenant cannot be combined with Also or a limit of a unit")
	case c.InFlight > 0:
		return c.fail("Tenant cannot be combined with InFlight")
	}
	c.Weights = maps.Clone(c.Weights) // the caller may change its map
	for name, w := range c.Weights {
		if w < 1 || w > maxWeight {
			// The name may be secret-derived: only its hash is said.
			return c.fail("Weights: the weight of tenant %s is %d: must be 1 to %d", hashed("sha256:", name), w, maxWeight)
		}
	}
	c.plan.Tenants = true
	return nil
}

// tenant returns req's tenant under c, as its Tenant function names it, and
// its finish tag's step for a request of cost; "" without tenants.
func (c *rule) tenant(req *http.Request, cost int) (string, int64, error) {
	if !c.plan.Tenants {
		return "", 0, nil
	}
	name, err := c.Tenant(req)
	if err == nil && name == "" {
		err = keyErr("the tenant function returned an empty tenant")
	}
	if err != nil {
		return "", 0, &KeyError{Rule: c.Name, Reason: fmt.Sprintf("tenant: %v", err)}
	}
	w, ok := c.Weights[name]
	if !ok {
		w = 1
	}
	return name, contract.TenantStep(cost, w), nil
}

// tenantMember is the tenant as the store keeps it: hashed, whatever its
// name (a customer's id, a token): no name reaches the store.
func tenantMember(stored string) string {
	sum := sha256.Sum256([]byte(stored))
	return hex.EncodeToString(sum[:16])
}
