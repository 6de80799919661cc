package contract

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Fair shares between tenants of one key (docs/tenants.md): start-time fair
// queueing over the lanes' mechanism. Each request of a tenant gets a start
// tag S = max(V, F), where F is the tenant's last finish tag and V the key's
// virtual time (the start tag of the latest slot that came), and the tenant's
// finish tag becomes S + Request.Step. A request takes the earliest waiting
// slot whose start tag is larger than its own, as a higher lane takes a
// lower lane's: a light tenant's request (S = V) goes before every backlog,
// and backlogged tenants' waiters interleave in proportion to their weights.
//
// The key keeps one small set of active tenants' finish tags beside its
// index of yielding slots; tenants whose finish tag fell behind V are
// dropped from it in the same call.

// TenantScale is the step of a request of cost 1 and weight 1: tags are
// integers, and a weight up to MaxWeight still moves a tag.
const TenantScale = 1_000_000

// MaxWeight bounds a tenant's weight.
const MaxWeight = 10_000

// TenantStep is the finish tag's step of a request of cost units from a
// tenant of weight w (1 to MaxWeight): cost × TenantScale / w, rounded up,
// at most maxStep (a request of more than 4,294 units at weight 1 moves its
// tenant's tag as one of 4,294 does).
func TenantStep(cost, w int) int64 {
	return min((int64(cost)*TenantScale+int64(w)-1)/int64(w), maxStep)
}

// maxStep bounds Request.Step: tags stay exact in Lua's numbers (2^53) for
// more than a million steps of the largest.
const maxStep = 1 << 32

// tenanted reports whether r is a tenant's.
func (r *Request) tenanted() bool { return r.Tenant != "" || r.Step != 0 || r.Again || r.Tag != 0 }

// tenantValid reports whether r's tenant fields are well formed: a tenant
// of at most 64 bytes without ':' (a hashed name), a step from 1 to maxStep,
// yielding, without a lane, on a sliding log without more keys or a cap;
// a tag only with Again, from 0 to maxTag.
func (r *Request) tenantValid() bool {
	return r.Tenant != "" && len(r.Tenant) <= 64 && !strings.ContainsRune(r.Tenant, ':') &&
		r.Step >= 1 && r.Step <= maxStep && r.Yield && r.Lane == 0 &&
		r.Algorithm == SlidingLog && r.Also == nil && r.InFlight == 0 &&
		(r.Again || r.Tag == 0) && r.Tag >= 0 && r.Tag <= maxTag
}

// maxTag bounds Request.Tag: exact in Lua's numbers.
const maxTag = 1 << 53

// tenantInvalid returns the error of a tenant field of r, nil if none.
func (r *Request) tenantInvalid() error {
	if !r.tenanted() || r.tenantValid() {
		return nil
	}
	return fmt.Errorf("%w: tenant: a name of 1 to 64 bytes without ':' and a step of 1 to %d, yielding, "+
		"in lane 0, on a sliding log without Also or InFlight; a tag of 0 to 2^53 only again", ErrInvalidRequest, int64(maxStep))
}

// TenantMember is the name of a tenant's yielding reservation in its key's
// index: LaneMember with its start tag in place of a lane. lanes.lua builds
// the same string.
func TenantMember(token string, tag int64, r *Request, entry int64) string {
	return member(token, tag, r, entry)
}

// MemberRank reads the lane, or the start tag, of a member of the index;
// -1 if it has none.
func MemberRank(m string) int64 {
	for range 3 { // entry, allowance, cost
		i := strings.LastIndexByte(m, ':')
		if i < 0 {
			return -1
		}
		m = m[:i]
	}
	i := strings.LastIndexByte(m, ':')
	if i < 0 {
		return -1
	}
	v, err := strconv.ParseInt(m[i+1:], 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64/2 {
		return -1
	}
	return v
}

// TenantToken is the token of a tenant's yielding reservation, made of a
// token (without ';' or ':') and its tenant: a request of the tenant taken
// again (Request.Again) skips the slots of its own (MemberTenant). ';'
// orders as ':' does against a token's characters, so members order in
// the index as their tokens alone would.
func TenantToken(token, tenant string) string { return token + ";" + tenant }

// MemberTenant is the tenant of a member of the index made with
// TenantToken; "" if none.
func MemberTenant(m string) string {
	end := strings.IndexByte(m, ':')
	if end < 0 {
		return ""
	}
	i := strings.IndexByte(m[:end], ';')
	if i < 0 {
		return ""
	}
	return m[i+1 : end]
}
