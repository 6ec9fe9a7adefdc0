package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKernelsInCPUEmulation compiles the CUDA C kernels as C++ against the
// small emulation in testdata/emu (one thread per GPU thread, a barrier for
// __syncthreads) and checks every kernel against a double-precision
// reference: indexing, transposes, tile edges, reduction trees, padding rows
// and repeatability, without a GPU. The GPU tests check the same on the
// device. For out-of-bounds checks, build the same way by hand with
// -O0 -fsanitize=address,undefined.
func TestKernelsInCPUEmulation(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not compiling the kernel emulation")
	}
	src := filepath.Join("testdata", "emu", "kernels_test.cpp")
	if _, err := os.Stat(src); err != nil {
		t.Skip("kernel sources not here (a test binary carried to another machine); not emulating the kernels")
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not installed; not emulating the kernels")
	}
	bin := filepath.Join(t.TempDir(), "kernels_test")
	build := exec.Command(cxx, "-std=c++20", "-O1", "-pthread", "-I", "kernels", "-o", bin, src)
	if out, err := build.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "barrier") {
			t.Skipf("g++ lacks C++20 <barrier>; not emulating the kernels:\n%s", out)
		}
		t.Fatalf("compiling the kernels for emulation: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("emulated kernels: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}
