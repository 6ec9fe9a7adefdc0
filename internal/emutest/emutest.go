// Package emutest is what the tests that build the emulated CUDA driver
// (device/cuda/emulator) share: the check that the tools it needs are
// installed, and the build itself.
package emutest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireEnv, set to anything non-empty (make test sets it), turns a
// missing tool into a failure rather than a skip.
const RequireEnv = "TOLARIA_REQUIRE_EMULATION"

// Build checks that g++, a C compiler and the CUDA headers are installed,
// builds the emulated driver of the repository at root into a temporary
// directory and returns that directory and the directory of cuda.h.
// Without the tools it skips t, saying what not runs (what), or fails t
// when RequireEnv is set.
func Build(t testing.TB, root, what string) (dir, include string) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv(RequireEnv) != "" {
		skip = t.Fatalf
	}
	for _, tool := range []string{"g++", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s is not installed (scripts/install-deps.sh test installs it); not running %s", tool, what)
		}
	}
	for _, d := range []string{"/usr/include", "/usr/local/cuda/include"} {
		if _, err := os.Stat(filepath.Join(d, "cuda.h")); err == nil {
			include = d
			break
		}
	}
	if include == "" {
		skip("no CUDA headers (scripts/install-cuda.sh installs them); not running %s", what)
	}
	dir = t.TempDir()
	if out, err := exec.Command(filepath.Join(root, "scripts", "build-cuda-emulator.sh"), dir).CombinedOutput(); err != nil {
		t.Fatalf("building the emulated CUDA driver: %v\n%s", err, out)
	}
	return dir, include
}
