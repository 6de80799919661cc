package clusterslot

import "testing"

// The Redis Cluster specification's example: CRC16 of "123456789" is 0x31C3;
// and keys with the same hash tag share a slot.
func TestOf(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, c := range []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 % Slots},
		{"{user1000}.following", Of("user1000")},
		{"foo{}{bar}", Of("foo{}{bar}")},
		{"foo{{bar}}zap", Of("{bar")},
	} {
		if got := Of(c.key); got != c.want {
			t.Errorf("Of(%q) = %d, want %d", c.key, got, c.want)
		}
	}
	if HashTag("foo{}{bar}") != "foo{}{bar}" || HashTag("foo{{bar}}zap") != "{bar" || HashTag("a{b}c") != "b" {
		t.Errorf("HashTag disagrees with the specification's examples")
	}
}
