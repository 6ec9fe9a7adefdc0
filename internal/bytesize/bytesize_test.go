package bytesize

import (
	"strings"
	"testing"
)

// TestParse: sizes in IEC and SI units read as documented, 0 is a size
// (what --device-memory takes for "what the device reports"), and
// everything that is not a size is refused with what to give, never read
// as another number (NaN once came out as -2^63).
func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "8GiB": 8 << 30, "512MiB": 512 << 20, "225KiB": 225 << 10,
		"16GB": 16e9, "1.5GiB": 3 << 29, "2 mib": 2 << 20, " 4KB ": 4000,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"NaN", "nan", "Inf", "+Inf", "-1", "-1GiB", "", " ", "abc", "8 parsecs", "1,5GB", "0x10", "16EiB", "99999999999999999999999"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d; want a refusal", in, got)
		} else if !strings.Contains(err.Error(), "8GiB") {
			t.Errorf("Parse(%q): %v; want the refusal to say what to give", in, err)
		}
	}
}
