package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// requireEmulationEnv, set to anything non-empty, turns the skips of
// TestKernelsInCPUEmulation into failures, as TOLARIA_E2E_REQUIRE_PROMETHEUS
// does for the end-to-end tests that need Prometheus.
const requireEmulationEnv = "TOLARIA_REQUIRE_EMULATION"

// TestKernelsInCPUEmulation compiles the CUDA C kernels as C++ against the
// small emulation in testdata/emu (one thread per GPU thread, a barrier for
// __syncthreads) and checks every kernel against a double-precision
// reference: indexing, transposes, tile edges, reduction trees, padding rows
// and repeatability, without a GPU. The GPU tests check the same on the
// device. For out-of-bounds checks, build the same way by hand with
// -O0 -fsanitize=address,undefined.
//
// Without g++ (or in -short mode) the test skips, unless the environment sets
// requireEmulationEnv: then it fails instead, so a test command that sets it
// cannot pass without having emulated the kernels.
func TestKernelsInCPUEmulation(t *testing.T) {
	skip := t.Skipf
	if os.Getenv(requireEmulationEnv) != "" {
		skip = func(format string, args ...any) {
			t.Helper()
			t.Fatalf(requireEmulationEnv+" is set, but the kernel emulation cannot run: "+format, args...)
		}
	}
	if testing.Short() {
		skip("-short: not compiling the kernel emulation")
	}
	src := filepath.Join("testdata", "emu", "kernels_test.cpp")
	if _, err := os.Stat(src); err != nil {
		skip("kernel sources not here (a test binary carried to another machine); not emulating the kernels")
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		skip("g++ not installed (scripts/install-deps.sh test installs it); not emulating the kernels")
	}
	bin := filepath.Join(t.TempDir(), "kernels_test")
	build := exec.Command(cxx, "-std=c++20", "-O1", "-pthread", "-I", "kernels", "-o", bin, src)
	if out, err := build.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "barrier") {
			skip("g++ lacks C++20 <barrier>; not emulating the kernels:\n%s", out)
		}
		t.Fatalf("compiling the kernels for emulation: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("emulated kernels: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}
