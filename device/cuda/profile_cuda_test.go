//go:build cuda

package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// With ProfileEnv set, Close writes one row per kernel and geometry with
// the eager launches counted, and a captured launch (replayed later) is
// not among them.
func TestKernelProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kernels.txt")
	t.Setenv(ProfileEnv, path)
	d, err := Open(Config{})
	check(t, "Open", err)
	s := mustStream(t, d)
	x := mustUpload(t, d, make([]float32, 1000))
	const scales = profileBatch + 5 // one batch read before Close, the rest at Close
	for range scales {
		check(t, "Scale", s.Scale(x, 1))
	}
	a := mustUpload(t, d, make([]float32, 64*64))
	for range 3 {
		check(t, "Gemm", s.Gemm(false, false, 64, 64, 64, 1, a, a, 0, a))
	}
	check(t, "BeginCapture", s.BeginCapture(device.CaptureGlobal))
	check(t, "Fill in a capture", s.Fill(x, 1))
	g, err := s.EndCapture()
	check(t, "EndCapture", err)
	ex, err := d.Instantiate(g)
	check(t, "Instantiate", err)
	check(t, "Launch", s.Launch(ex))
	check(t, "Synchronize", s.Synchronize())
	check(t, "Close", d.Close())

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the profile was not written: %v", err)
	}
	text := string(raw)
	t.Logf("profile:\n%s", text)
	launches := func(kernel string) int {
		t.Helper()
		m := regexp.MustCompile(`(?m)^\s*` + kernel + `\s+\d+x\d+\s+\d+x\d+\s+(\d+)\s`).FindStringSubmatch(text)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if n := launches("tl_scale"); n != scales {
		t.Errorf("tl_scale launches = %d, want %d", n, scales)
	}
	if n := launches("tl_gemm"); n != 3 {
		t.Errorf("tl_gemm launches = %d, want 3", n)
	}
	if strings.Contains(text, "tl_fill") {
		t.Errorf("the captured tl_fill was profiled; only eager launches are")
	}
	if !strings.Contains(text, "launches, ") || strings.Contains(text, "not timed") {
		t.Errorf("the header does not say the launches were all timed")
	}
}
