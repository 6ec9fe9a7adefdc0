//go:build cuda

package cuda

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDevicesListsTheDrivers: Devices describes every device the driver
// counts, each as Open describes it, with free memory no more than total.
func TestDevicesListsTheDrivers(t *testing.T) {
	gpus, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) == 0 {
		t.Fatal("no device listed, yet TestMain found one")
	}
	for i, g := range gpus {
		t.Logf("%+v", g)
		if g.Ordinal != i || g.Name == "" || g.PCIBusID == "" || g.TotalBytes <= 0 || g.FreeBytes <= 0 || g.FreeBytes > g.TotalBytes {
			t.Errorf("device %d: %+v", i, g)
		}
		if !g.Usable || g.Reason != "" {
			t.Errorf("device %d (compute capability %s) is not usable: %q", i, g.ComputeCapability, g.Reason)
		}
	}
	d := openTest(t)
	if d.Description() != gpus[0].Name || d.total != gpus[0].TotalBytes || d.cc != gpus[0].ComputeCapability {
		t.Errorf("Open(0) is %q, %d bytes, %s; Devices says %+v", d.Description(), d.total, d.cc, gpus[0])
	}
}

// devicesChildEnv makes this test binary print Devices() as JSON and exit,
// for TestDevicesHonourVisibleDevices.
const devicesChildEnv = "TOLARIA_TEST_DEVICES_CHILD"

// TestDevicesHonourVisibleDevices: on the emulated driver with four
// devices, CUDA_VISIBLE_DEVICES=2,0 leaves two, the machine's devices 2
// and 0 in that order (the emulator's PCI bus id is the machine's device
// number). A real GPU machine's devices are what they are: there it skips.
func TestDevicesHonourVisibleDevices(t *testing.T) {
	if os.Getenv(devicesChildEnv) != "" {
		gpus, err := Devices()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.NewEncoder(os.Stdout).Encode(gpus); err != nil {
			t.Fatal(err)
		}
		return
	}
	if d := openTest(t); d.Description() != "tolaria emulated CUDA device" {
		t.Skipf("a real GPU (%s): CUDA_VISIBLE_DEVICES is the machine's to set", d.Description())
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDevicesHonourVisibleDevices$")
	cmd.Env = append(os.Environ(), devicesChildEnv+"=1", "CUDAEMU_DEVICES=4", "CUDA_VISIBLE_DEVICES=2,0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the child: %v\n%s", err, out)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	var gpus []GPU
	if err := json.Unmarshal([]byte(line), &gpus); err != nil {
		t.Fatalf("the child printed %q: %v", out, err)
	}
	if len(gpus) != 2 || gpus[0].PCIBusID != "00000000:02:00.0" || gpus[1].PCIBusID != "00000000:00:00.0" ||
		gpus[0].Ordinal != 0 || gpus[1].Ordinal != 1 {
		t.Fatalf("with CUDA_VISIBLE_DEVICES=2,0 of 4: %+v; want the machine's devices 2 then 0 as ordinals 0 and 1", gpus)
	}
}
