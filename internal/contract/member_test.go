package contract

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMemberTokens: a member's tenant and place in line read back as they
// were written, and the tokens order members as the bare tokens would.
func TestMemberTokens(t *testing.T) {
	r := &Request{Cost: 1, Lane: 0, Yield: true}
	lane := LaneMember(LaneToken("ab12.z9", 1764000000123456), r, 1764000000128456)
	assert.Equal(t, int64(1764000000123456), MemberSince(lane))
	assert.Equal(t, "", MemberTenant(lane))
	assert.Equal(t, int64(0), MemberRank(lane))

	ten := TenantMember(TenantToken("ab12.z9", "f00d"), 7000000, r, 1764000000128456)
	assert.Equal(t, "f00d", MemberTenant(ten))
	assert.Equal(t, int64(-1), MemberSince(ten))
	assert.Equal(t, int64(7000000), MemberRank(ten))

	assert.Equal(t, int64(-1), MemberSince("ab12.z9:0:1:5000:1"), "a member without a place in line")
	assert.Equal(t, "", MemberTenant("garbage"))

	// ';' and '=' sort as ':' does against a token's digits and letters.
	for _, p := range [][2]string{{"m1", "m10"}, {"m1", "m1a"}, {"m9", "ma"}, {"m10", "m9"}} {
		bare := LaneMember(p[0], r, 1) < LaneMember(p[1], r, 1)
		assert.Equal(t, bare, LaneMember(LaneToken(p[0], 5), r, 1) < LaneMember(LaneToken(p[1], 5), r, 1), "%v", p)
		assert.Equal(t, bare, TenantMember(TenantToken(p[0], "t"), 1, r, 1) < TenantMember(TenantToken(p[1], "t"), 1, r, 1), "%v", p)
	}
}
