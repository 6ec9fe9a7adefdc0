package cuda

import (
	"fmt"
	"regexp"
	"strings"
)

// JITLog is what the driver's PTX compiler logged while loading tolaria's
// kernels: the module is PTX (compute_80, no cubin), so every driver
// compiles it for its own GPU when a device opens, and a driver that
// refuses it says why only in the error log.
type JITLog struct {
	Info   string  `json:"info"`    // the info log (with CU_JIT_LOG_VERBOSE: registers and memory per kernel)
	Error  string  `json:"error"`   // the error log: empty unless the load failed
	WallMS float64 `json:"wall_ms"` // CU_JIT_WALL_TIME: milliseconds in the compiler and linker
}

// Info describes an opened device, its driver and the kernels' module: the
// first thing a GPU check prints, so that any later failure is read
// against what ran.
type Info struct {
	Name              string `json:"name"`               // "cuda:<ordinal>"
	Model             string `json:"model"`              // the driver's name of the GPU
	ComputeCapability string `json:"compute_capability"` // e.g. "9.0"
	DriverVersion     int    `json:"driver_version"`     // cuDriverGetVersion: 1000*major + 10*minor
	TotalBytes        int64  `json:"total_bytes"`
	PTXVersion        string `json:"ptx_version"` // the ISA version the embedded PTX declares (".version")
	PTXTarget         string `json:"ptx_target"`  // the architecture it names (".target")
	JIT               JITLog `json:"jit"`
}

// DriverRelease is the driver's CUDA version as people write it ("13.0").
func (i Info) DriverRelease() string {
	return fmt.Sprintf("%d.%d", i.DriverVersion/1000, i.DriverVersion%1000/10)
}

// String is Info in a few lines, the JIT's info log last.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %s: %s, compute capability %s, %.1f GiB\n", i.Name, i.Model, i.ComputeCapability,
		float64(i.TotalBytes)/(1<<30))
	fmt.Fprintf(&b, "driver: CUDA %s (cuDriverGetVersion %d)\n", i.DriverRelease(), i.DriverVersion)
	fmt.Fprintf(&b, "kernels: PTX ISA %s for %s, JIT-compiled at load in %.1f ms\n", i.PTXVersion, i.PTXTarget, i.JIT.WallMS)
	if i.JIT.Info != "" {
		fmt.Fprintf(&b, "JIT info log:\n%s\n", indent(i.JIT.Info))
	}
	return b.String()
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

var ptxHeaderRE = regexp.MustCompile(`(?m)^\s*\.(version|target)\s+([^\s/]+)`)

// ptxHeader returns the ISA version and target a PTX module declares.
func ptxHeader(src string) (version, target string) {
	for _, m := range ptxHeaderRE.FindAllStringSubmatch(src, -1) {
		switch {
		case m[1] == "version" && version == "":
			version = m[2]
		case m[1] == "target" && target == "":
			target = strings.TrimSuffix(m[2], ",")
		}
	}
	return version, target
}

// loadFailure is the detail of a module that would not load: the driver's
// JIT error log when it wrote one, with what was being loaded.
func loadFailure(log JITLog) string {
	v, t := ptxHeader(ptxSource)
	detail := fmt.Sprintf("loading the kernels' PTX (ISA %s, %s; a driver older than the toolkit that built it refuses a newer ISA)", v, t)
	if log.Error != "" {
		detail += "; the driver's JIT error log:\n" + indent(log.Error)
	} else {
		detail += "; the driver wrote no JIT error log"
	}
	return detail
}
