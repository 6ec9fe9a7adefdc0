package cuda

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

func TestPTXHasEveryKernel(t *testing.T) {
	entries, err := ptxEntries(ptxSource)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for k := kernel(0); k < numKernels; k++ {
		want[kernelNames[k]] = true
		if _, ok := entries[kernelNames[k]]; !ok {
			t.Errorf("kernel %s is not an entry of kernels/tolaria.ptx", kernelNames[k])
		}
	}
	for name := range entries {
		if !want[name] {
			t.Errorf("PTX entry %s has no kernel constant in ptx.go", name)
		}
	}
}

// The reductions assume the exact block size they are launched with, and
// __launch_bounds__ records it in the PTX as .maxntid.
func TestKernelGeometryMatchesPTX(t *testing.T) {
	entries, err := ptxEntries(ptxSource)
	if err != nil {
		t.Fatal(err)
	}
	for k := kernel(0); k < numKernels; k++ {
		if got, want := entries[kernelNames[k]], kernelThreads[k]; got != want {
			t.Errorf("%s: PTX .maxntid allows %d threads, Go launches %d", k, got, want)
		}
	}
}

// Determinism rests on reductions without atomics; an atomic in the PTX
// means a kernel changed in a way that can break replay-equals-eager.
func TestPTXHasNoAtomics(t *testing.T) {
	re := regexp.MustCompile(`(?m)^\s*(atom|red)\.`)
	if loc := re.FindStringIndex(ptxSource); loc != nil {
		t.Errorf("PTX contains an atomic instruction: %q", ptxSource[loc[0]:min(loc[0]+60, len(ptxSource))])
	}
}

// TestPTXInSync recompiles the kernels when nvcc is installed (see
// scripts/install-cuda.sh) and compares with the embedded PTX; scripts/check-ptx.sh
// does the same for `make test`.
func TestPTXInSync(t *testing.T) {
	script := filepath.Join("..", "..", "scripts", "build-ptx.sh")
	if _, err := os.Stat(script); err != nil {
		t.Skip("scripts/build-ptx.sh not here (a test binary carried to another machine); not checking the PTX")
	}
	if _, err := exec.LookPath("nvcc"); err != nil {
		t.Skip("nvcc not installed (scripts/install-cuda.sh installs it); not checking the PTX against the sources")
	}
	if testing.Short() {
		t.Skip("-short: not compiling the kernels")
	}
	out := filepath.Join(t.TempDir(), "tolaria.ptx")
	cmd := exec.Command(script, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build-ptx.sh: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte(ptxSource)) {
		t.Errorf("PTX out of date: run make ptx (scripts/build-ptx.sh) and commit device/cuda/kernels/tolaria.ptx")
	}
}

func TestPTXEntriesParsesMaxntid(t *testing.T) {
	src := ".visible .entry a(\n.param .u32 x\n)\n.maxntid 32, 8, 1\n{\n}\n.visible .entry b(\n)\n{\n}\n"
	got, err := ptxEntries(src)
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != 256 || got["b"] != 0 || len(got) != 2 {
		t.Errorf("ptxEntries = %v, want map[a:256 b:0]", got)
	}
}
