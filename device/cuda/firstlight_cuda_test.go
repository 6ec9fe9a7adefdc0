//go:build cuda

package cuda

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
)

// FirstLightEnv names a file TestFirstLight writes the device's Info to, as
// JSON: the GPU bundle's first check, whose report heads results/report.md.
const FirstLightEnv = "TOLARIA_FIRST_LIGHT_JSON"

// TestFirstLight opens the device, which loads the kernels' PTX through the
// driver's JIT with its logs captured, and prints what ran: the GPU, its
// compute capability, the driver's CUDA version and the JIT's info log. It
// is the first check the GPU bundle runs, so that every later failure is
// read against the device and driver it happened on.
func TestFirstLight(t *testing.T) {
	d := openTest(t)
	info := d.Info()
	t.Logf("first light:\n%s", info)
	if info.Model == "" {
		t.Error("the driver named no GPU model")
	}
	if !regexp.MustCompile(`^\d+\.\d+$`).MatchString(info.ComputeCapability) {
		t.Errorf("compute capability %q, want MAJOR.MINOR", info.ComputeCapability)
	}
	if info.DriverVersion < 11000 {
		t.Errorf("cuDriverGetVersion = %d, want a CUDA 11.0 driver or newer", info.DriverVersion)
	}
	if info.PTXVersion == "" || info.PTXTarget == "" {
		t.Errorf("the embedded PTX declares ISA %q and target %q; both must be set", info.PTXVersion, info.PTXTarget)
	}
	if info.JIT.Error != "" {
		t.Errorf("the module loaded but the JIT's error log holds %q", info.JIT.Error)
	}
	if path := os.Getenv(FirstLightEnv); path != "" {
		b, err := json.MarshalIndent(info, "", "  ")
		check(t, "marshal Info", err)
		check(t, "write "+path, atomicfile.WriteFile(path, append(b, '\n'), 0o644))
	}
}

// TestModuleRefusalCarriesTheJITLog: PTX no driver can compile is refused,
// and the reason the driver's JIT gave reaches the error. That the driver
// writes its reason into the error log for an unknown ISA version is
// observed driver behaviour, not a documented promise: a failure here on a
// GPU means the log option, not tolaria's loading, changed.
func TestModuleRefusalCarriesTheJITLog(t *testing.T) {
	d := openTest(t)
	bad := regexp.MustCompile(`(?m)^\.version\s+\S+`).ReplaceAllString(ptxSource, ".version 99.9")
	var log JITLog
	var r cuResult
	check(t, "load on the control thread", d.ctl.do(func() error {
		mod, l, res := loadModule(bad)
		log, r = l, res
		if res == cuSuccess {
			mod.Unload()
		}
		return nil
	}))
	if r == cuSuccess {
		t.Fatal("the driver loaded PTX of ISA version 99.9")
	}
	if r != cuErrUnsupportedPTXVersion && r != cuErrInvalidPTX {
		t.Errorf("loading PTX ISA 99.9 failed with %v, want CUDA_ERROR_UNSUPPORTED_PTX_VERSION or CUDA_ERROR_INVALID_PTX", DriverError{r})
	}
	if !strings.Contains(log.Error, "99.9") {
		t.Errorf("belief (undocumented): the JIT error log names the refused version 99.9; it holds %q", log.Error)
	}
	detail := loadFailure(log)
	if !strings.Contains(detail, log.Error) || !strings.Contains(detail, "JIT error log") {
		t.Errorf("the load failure's detail %q leaves out the JIT error log", detail)
	}
	t.Logf("the driver refused ISA 99.9 with %v:\n%s", DriverError{r}, log.Error)
}
