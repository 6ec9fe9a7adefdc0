package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGPUTestsFailWithoutADevice builds this package's GPU tests (-tags
// cuda) and runs them against testdata/nodevice, a CUDA driver that
// initialises and reports no device: the binary must fail and say "no CUDA
// device", so that the GPU bundle cannot count a machine without a GPU as
// a pass. It needs the Go toolchain, a C compiler and the CUDA headers
// (scripts/install-cuda.sh); without them it skips, unless the
// environment sets requireEmulationEnv.
func TestGPUTestsFailWithoutADevice(t *testing.T) {
	skip := t.Skipf
	if os.Getenv(requireEmulationEnv) != "" {
		skip = func(format string, args ...any) {
			t.Helper()
			t.Fatalf(requireEmulationEnv+" is set, but the GPU tests cannot be built against a driver without a device: "+format, args...)
		}
	}
	if testing.Short() {
		skip("-short: not building the GPU tests")
	}
	src := filepath.Join("testdata", "nodevice", "libcuda.c")
	if _, err := os.Stat(src); err != nil {
		skip("sources not here (a test binary carried to another machine)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		skip("no go command in PATH")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		skip("no C compiler (cc) in PATH")
	}
	if !hasCUDAHeaders() {
		skip("no CUDA headers (scripts/install-cuda.sh installs them)")
	}
	dir := t.TempDir()
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", filepath.Join(dir, "libcuda.so.1"), src).CombinedOutput(); err != nil {
		t.Fatalf("building the driver without a device: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "device_cuda.test")
	build := exec.Command(goTool, "test", "-tags", "cuda", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the GPU tests: %v\n%s", err, out)
	}
	run := exec.Command(bin, "-test.v")
	run.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
	out, err := run.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("the GPU tests without a device: %v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(string(out), "no CUDA device") || strings.Contains(string(out), "=== RUN") {
		t.Fatalf("the GPU tests without a device ran tests or did not say \"no CUDA device\":\n%s", out)
	}
}

// hasCUDAHeaders looks for cuda.h where scripts/install-cuda.sh does.
func hasCUDAHeaders() bool {
	for _, dir := range []string{"/usr/include", "/usr/local/cuda/include"} {
		if _, err := os.Stat(filepath.Join(dir, "cuda.h")); err == nil {
			return true
		}
	}
	return false
}
