package device

import (
	"strings"
	"testing"
)

func culpritFromHelper() string { return Culprit(0) }

// Culprit names the caller's own frames first, with no runtime or testing
// frames, and the goroutine's number.
func TestCulpritNamesTheCaller(t *testing.T) {
	got := culpritFromHelper()
	if !strings.HasPrefix(got, "goroutine ") {
		t.Fatalf("Culprit() = %q, want it to start with the goroutine", got)
	}
	first := strings.SplitN(got, " <- ", 2)[0]
	if !strings.Contains(first, "device.culpritFromHelper (device/culprit_test.go:") {
		t.Errorf("first frame is %q, want the helper that called Culprit", first)
	}
	if !strings.Contains(got, "TestCulpritNamesTheCaller") {
		t.Errorf("Culprit() = %q, want the test that called the helper", got)
	}
	for _, bad := range []string{"runtime.", "testing.tRunner"} {
		if strings.Contains(got, bad) {
			t.Errorf("Culprit() = %q names a %s frame", got, bad)
		}
	}
}

func TestKeepFrame(t *testing.T) {
	for _, c := range []struct {
		fn, file string
		keep     bool
	}{
		{"github.com/tolaria-ml/tolaria/device/cpu.(*Device).checkSafe", "/r/device/cpu/device.go", false},
		{"github.com/tolaria-ml/tolaria/device.Culprit", "/r/device/culprit.go", false},
		{"github.com/tolaria-ml/tolaria/device/devicetest.stageBatchFromLoader", "/r/device/devicetest/runtime.go", true},
		{"github.com/tolaria-ml/tolaria/device/cpu.TestX", "/r/device/cpu/x_test.go", true},
		{"github.com/tolaria-ml/tolaria/data.(*Loader).stage", "/r/data/loader.go", true},
		{"github.com/tolaria-ml/tolaria/devicex.F", "/r/devicex/f.go", true},
		{"runtime.goexit", "/go/src/runtime/asm.s", false},
		{"testing.tRunner", "/go/src/testing/testing.go", false},
	} {
		if got := keepFrame(c.fn, c.file); got != c.keep {
			t.Errorf("keepFrame(%q) = %v, want %v", c.fn, got, c.keep)
		}
	}
}
