package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/jobserver"
)

// devicesOnEmulatedDriver: `tolaria-worker devices` lists what the driver
// reports after CUDA_VISIBLE_DEVICES, on an emulated machine of four GPUs;
// with none visible the list is empty, and a worker built without CUDA
// says so.
func devicesOnEmulatedDriver(t *testing.T, emu string) {
	list := func(visible string) (jobserver.DevicesResult, string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(emu, "tolaria-worker"), "devices")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+emu, "CUDAEMU_DEVICES=4", "CUDA_VISIBLE_DEVICES="+visible)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tolaria-worker devices with CUDA_VISIBLE_DEVICES=%s: %v\n%s", visible, err, stderr.String())
		}
		var res jobserver.DevicesResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("tolaria-worker devices printed %q: %v", out, err)
		}
		return res, string(out)
	}
	res, out := list("3,1")
	if len(res.GPUs) != 2 || res.GPUs[0].PCIBusID != "00000000:03:00.0" || res.GPUs[1].PCIBusID != "00000000:01:00.0" ||
		res.GPUs[0].Ordinal != 0 || res.GPUs[1].Ordinal != 1 || !res.GPUs[0].Usable || res.GPUs[0].FreeBytes <= 0 ||
		res.GPUs[0].FreeBytes > res.GPUs[0].TotalBytes {
		t.Fatalf("CUDA_VISIBLE_DEVICES=3,1 of 4:\n%s\nwant the machine's devices 3 and 1 as ordinals 0 and 1", out)
	}
	if res, out := list(""); len(res.GPUs) != 0 {
		t.Fatalf("CUDA_VISIBLE_DEVICES empty:\n%s\nwant no GPU", out)
	}
	cpuWorker := exec.Command(filepath.Join(binDir, "tolaria-worker"), "devices")
	msg, err := cpuWorker.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "built without CUDA") {
		t.Fatalf("the CPU worker's devices: %v\n%s", err, msg)
	}
}
