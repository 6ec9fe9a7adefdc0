//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
	"gorgonia.org/cu"
)

// contextLockWait bounds the wait for another process's context creation
// on the same GPU (seconds, normally); past it the reading is taken
// without the lock, and the source says so.
const contextLockWait = 2 * time.Minute

// contextMeasure is how Open measured what the context and modules took
// (see ContextMemory).
type contextMeasure struct {
	bus    string // the GPU's PCI location, "" when unknown
	source string // ContextFromNVML or a driver source with its reason
	bytes  int64  // the driver's reading at Open (driver sources)
}

// gpuBusID is the GPU's PCI location (domain:bus:device.0, as
// cuDeviceGetPCIBusId formats it), from the device's attributes. Runs on
// the control thread during Open.
func (d *Device) gpuBusID() (string, error) {
	var v [3]int
	for i, a := range []cu.DeviceAttribute{cu.PciDomainID, cu.PciBusID, cu.PciDeviceID} {
		n, err := d.dev.Attribute(a)
		if err != nil {
			return "", err
		}
		v[i] = n
	}
	return pciBusID(v[0], v[1], v[2]), nil
}

// contextLockPath is the per-GPU lock file: in $XDG_RUNTIME_DIR when set,
// else in os.TempDir(), named by the GPU's PCI location so that every
// process names the same GPU the same way whatever CUDA_VISIBLE_DEVICES
// calls it.
func contextLockPath(bus string) string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if fi, err := os.Stat(dir); dir == "" || err != nil || !fi.IsDir() {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "tolaria-cuda-context-"+bus+".lock")
}

// lockContextCreation takes the GPU's lock file before Open makes its
// context, so that no other tolaria process on the machine makes one on
// the same GPU until this one has read the driver's figure. It returns the
// release and, when the lock could not be taken, why.
func (d *Device) lockContextCreation() (release func(), why error) {
	bus, err := d.gpuBusID()
	if err != nil {
		return func() {}, fmt.Errorf("reading the GPU's PCI location: %w", err)
	}
	d.ctxMeasure.bus = bus
	path := contextLockPath(bus)
	l := flock.New(path)
	ctx, cancel := context.WithTimeout(context.Background(), contextLockWait)
	defer cancel()
	ok, err := l.TryLockContext(ctx, 10*time.Millisecond)
	if err != nil || !ok {
		if err == nil {
			err = ctx.Err()
		}
		return func() {}, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { _ = l.Unlock() }, nil
}

// measureContext runs at the end of Open, on the control thread with the
// context current and the lock (if taken) still held: it decides where
// ContextMemory's figure comes from. NVML first; when it cannot see this
// process, the driver's used memory now, whose failure fails Open (the
// reading cannot be taken later, without the lock).
func (d *Device) measureContext(lockErr error) error {
	m := &d.ctxMeasure
	var nvmlErr error
	if m.bus != "" {
		if _, nvmlErr = nvmlProcessUsed(m.bus, os.Getpid()); nvmlErr == nil {
			m.source = ContextFromNVML
			return nil
		}
	} else {
		nvmlErr = fmt.Errorf("the GPU's PCI location is unknown")
	}
	free, total, err := cu.MemInfo()
	if err != nil {
		de := driverErr(d.name, "Open", codeOf(err))
		de.Err = fmt.Errorf("reading the driver's used memory to measure the context (NVML unused: %v): %w", nvmlErr, de.Err)
		return de
	}
	m.bytes = max(0, total-free)
	m.source = ContextFromDriverLocked
	if lockErr != nil {
		m.source = ContextFromDriverUnlocked + "; " + lockErr.Error()
	}
	m.source += "; NVML unused: " + nvmlErr.Error()
	return nil
}

// ContextMemory is what this process holds on the GPU besides the
// allocations of the device's pool: its CUDA context and the module Open
// loaded, which a device-memory budget bills. source says how it was
// measured (the ContextFrom constants, with the reason NVML was not used
// where it was not):
//
//   - NVML's used memory of this process (nvmlDeviceGetComputeRunningProcesses
//     on the GPU found by its PCI location), less what the pool holds from
//     the driver now: exact whatever else runs on the GPU, and current
//     (graphs instantiated since Open count too).
//   - Else the driver's used memory (total less free) read at the end of
//     Open, under a per-GPU lock file that every tolaria process takes from
//     before it makes its context until that reading: no other tolaria
//     context is being made meanwhile, but what other processes already
//     hold on the GPU is counted too, so the figure errs high, never low;
//     it is exact on a GPU this process has to itself.
func (d *Device) ContextMemory() (bytes int64, source string, err error) {
	const op = "ContextMemory"
	if err := d.enter(op); err != nil {
		return 0, "", err
	}
	defer d.exit()
	m := d.ctxMeasure
	if m.source != ContextFromNVML {
		return m.bytes, m.source, nil
	}
	used, err := nvmlProcessUsed(m.bus, os.Getpid())
	if err != nil {
		return 0, m.source, fmt.Errorf("%s: %s: NVML answered at Open but not now: %w", d.name, op, err)
	}
	return max(0, used-d.pool.stats().reserved), m.source, nil
}
