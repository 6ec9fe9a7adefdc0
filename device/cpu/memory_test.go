package cpu

import (
	"errors"
	"runtime"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// An allocation larger than the machine is refused with ErrOutOfMemory,
// not a crash of the process, when no limit was configured.
func TestAllocBeyondTheMachineIsRefused(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the default limit is the physical memory on Linux only")
	}
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	limit := d.MemoryStats().DeviceLimit
	if limit <= 0 {
		t.Fatalf("default DeviceLimit %d, want the machine's memory", limit)
	}
	if _, err := d.Alloc(int(limit/4) + 1); !errors.Is(err, device.ErrOutOfMemory) {
		t.Fatalf("Alloc of more than the machine: %v, want ErrOutOfMemory", err)
	}
}
