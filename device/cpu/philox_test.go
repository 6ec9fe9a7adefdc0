package cpu

import "testing"

// TestPhiloxKnownAnswers: the generator gives the Random123 known answers
// for Philox 4x32-10.
func TestPhiloxKnownAnswers(t *testing.T) {
	cases := []struct{ ctr, key, want []uint32 }{
		{[]uint32{0, 0, 0, 0}, []uint32{0, 0}, []uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
		{[]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, []uint32{0xffffffff, 0xffffffff}, []uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
	}
	for _, c := range cases {
		w0, w1, w2, w3 := philox4x32(c.ctr[0], c.ctr[1], c.ctr[2], c.ctr[3], c.key[0], c.key[1])
		if got := []uint32{w0, w1, w2, w3}; got[0] != c.want[0] || got[1] != c.want[1] || got[2] != c.want[2] || got[3] != c.want[3] {
			t.Errorf("philox4x32(%#x, %#x) = %#x, want %#x", c.ctr, c.key, got, c.want)
		}
	}
}
