// Package bytesize reads the byte sizes users write (8GiB, 512MiB, 16GB,
// 1048576) the one way every setting of a size reads them, refusing what
// is not a size with what to give instead.
package bytesize

import (
	"fmt"
	"math"
	"strings"

	"github.com/dustin/go-humanize"
)

// Hint is what every refusal of a size says to give instead.
const Hint = "give bytes or a number with a unit, e.g. 8GiB, 512MiB or 16GB (KiB, MiB, GiB, TiB count in 1024s; KB, MB, GB, TB, and K, M, G, T alone, in 1000s)"

// Parse reads a byte size such as 8GiB, 512MiB, 16GB or 1048576.
// go-humanize does the reading (IEC units in powers of 1024, SI units in
// powers of 1000, case and a space before the unit ignored); what is left
// here is what it lets through: a thousands separator, which it drops
// (1,5GB would be 15GB), and sizes beyond an int64.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" || strings.Contains(t, ",") {
		return 0, fmt.Errorf("%q is not a size: %s", s, Hint)
	}
	n, err := humanize.ParseBytes(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %s", s, Hint)
	}
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large: give at most 8EiB", s)
	}
	return int64(n), nil
}
