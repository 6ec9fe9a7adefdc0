package cuda

import (
	"strings"
	"testing"
)

func TestPTXHeaderReadsTheEmbeddedModule(t *testing.T) {
	v, target := ptxHeader(ptxSource)
	if v == "" || !strings.HasPrefix(target, "sm_") {
		t.Fatalf("ptxHeader(embedded PTX) = %q, %q; want an ISA version and an sm_ target", v, target)
	}
	v, target = ptxHeader("// .version 1.0 in a comment\n.version 8.5\n.target sm_90a, debug\n")
	if v != "8.5" || target != "sm_90a" {
		t.Errorf("ptxHeader = %q, %q; want 8.5, sm_90a", v, target)
	}
}

func TestInfoSaysWhatRan(t *testing.T) {
	i := Info{Name: "cuda:0", Model: "NVIDIA H100 80GB HBM3", ComputeCapability: "9.0", DriverVersion: 13000,
		TotalBytes: 80 << 30, PTXVersion: "7.8", PTXTarget: "sm_80", JIT: JITLog{Info: "line 1\nline 2", WallMS: 12.5}}
	if got := i.DriverRelease(); got != "13.0" {
		t.Errorf("DriverRelease() = %q, want 13.0", got)
	}
	s := i.String()
	for _, want := range []string{"NVIDIA H100", "compute capability 9.0", "CUDA 13.0", "PTX ISA 7.8 for sm_80", "12.5 ms", "  line 2"} {
		if !strings.Contains(s, want) {
			t.Errorf("Info.String() lacks %q:\n%s", want, s)
		}
	}
	if got := loadFailure(JITLog{Error: "fatal: unsupported"}); !strings.Contains(got, "JIT error log:\n  fatal: unsupported") {
		t.Errorf("loadFailure = %q, want the JIT error log indented", got)
	}
	if got := loadFailure(JITLog{}); !strings.Contains(got, "no JIT error log") {
		t.Errorf("loadFailure without a log = %q, want it to say there was none", got)
	}
}
