package worker

import (
	"strings"
	"testing"
	"time"
)

// TestCheckHeartbeatTimeout: a timeout under the minimum, 0 included, is
// refused with the one wording every command and library shows; the
// minimum and more pass.
func TestCheckHeartbeatTimeout(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string // "" when accepted
	}{
		{0, "0s is too short (a loaded machine's scheduling could pass for a hang); give at least 1s, such as 30s"},
		{-5 * time.Second, "-5s is too short"},
		{10 * time.Millisecond, "10ms is too short"},
		{MinHeartbeatTimeout, ""},
		{DefaultHeartbeatTimeout, ""},
	} {
		err := CheckHeartbeatTimeout(c.d)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.d, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.d, err, c.want)
		}
	}
}
