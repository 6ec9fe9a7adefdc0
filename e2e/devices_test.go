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

// devicesOnEmulatedDriver: `tolaria-worker devices`, and `tolaria devices`
// through it, list what the driver reports after CUDA_VISIBLE_DEVICES, on
// an emulated machine of four GPUs; with none visible the list is empty,
// and a worker built without CUDA says so.
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
	// tolaria devices asks such a worker.
	env := []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=4", "CUDA_VISIBLE_DEVICES=3,1"}
	dir := t.TempDir()
	r := tolaria(t, dir, env, "devices", "--worker", filepath.Join(emu, "tolaria-worker"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "cuda:0") || !strings.Contains(lines[1], "00000000:03:00.0") ||
		!strings.HasPrefix(lines[2], "cuda:1") || !strings.Contains(lines[2], "00000000:01:00.0") || !strings.Contains(lines[1], "16 GiB") {
		t.Fatalf("tolaria devices: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = tolaria(t, dir, env, "devices", "--json", "--worker", filepath.Join(emu, "tolaria-worker"))
	var listed jobserver.DevicesResult
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || r.code != 0 || len(listed.GPUs) != 2 || listed.GPUs[1].PCIBusID != "00000000:01:00.0" {
		t.Fatalf("tolaria devices --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if r := tolaria(t, dir, nil, "devices", "--worker", filepath.Join(binDir, "tolaria-worker")); r.code != 1 || !strings.Contains(r.stderr, "built without CUDA") || r.stdout != "" {
		t.Fatalf("tolaria devices with the CPU worker: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	cpuWorker := exec.Command(filepath.Join(binDir, "tolaria-worker"), "devices")
	msg, err := cpuWorker.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "built without CUDA") {
		t.Fatalf("the CPU worker's devices: %v\n%s", err, msg)
	}
}
