// Package devicetest is the conformance suite for the device contract, in
// the spirit of testing/fstest: Run checks every promise of device.Device
// against any backend, so the CPU reference and the CUDA backend are held
// to the same rules.
package devicetest

import (
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// Opener opens a fresh device for a test and registers its Close with
// t.Cleanup.
type Opener func(t *testing.T) device.Device

// LimitedOpener opens a fresh device, as an Opener does, whose device memory
// is capped at limit bytes: an Alloc that would take the bytes in use past
// limit fails with device.ErrOutOfMemory, and MemoryStats reports limit as
// DeviceLimit.
type LimitedOpener func(t *testing.T, limit int64) device.Device

// Options are what a backend offers the suite beyond an Opener. The zero
// value is valid: a test that needs something the backend does not offer is
// skipped, and its skip message names the missing option.
type Options struct {
	// OpenLimited opens a device with a memory limit, for the
	// out-of-memory tests.
	OpenLimited LimitedOpener
}

// Run runs the whole conformance suite.
func Run(t *testing.T, open Opener, opts Options) {
	t.Run("memory", func(t *testing.T) { testMemory(t, open) })
	t.Run("out of memory", func(t *testing.T) { testOutOfMemory(t, opts.OpenLimited) })
	t.Run("closed", func(t *testing.T) { testClosed(t, open) })
	t.Run("close with live host buffers", func(t *testing.T) { testCloseWithLiveHostBuffers(t, open) })
	t.Run("destroy racing calls", func(t *testing.T) { testConcurrentDestroy(t, open) })
	t.Run("ordering", func(t *testing.T) { testOrdering(t, open) })
	t.Run("events", func(t *testing.T) { testEvents(t, open) })
	t.Run("capture", func(t *testing.T) { testCapture(t, open) })
	t.Run("violations", func(t *testing.T) { testViolations(t, open) })
	t.Run("isolation", func(t *testing.T) { testIsolation(t, open) })
	t.Run("update", func(t *testing.T) { testUpdate(t, open) })
	t.Run("launches of one executable in issue order", func(t *testing.T) { testLaunchOrder(t, open) })
	t.Run("freed memory held by an executable", func(t *testing.T) { testFreedMemoryHeldByExec(t, open) })
	t.Run("free without a stall", func(t *testing.T) { testFreeWithoutStall(t, open) })
	t.Run("misuse", func(t *testing.T) { testMisuse(t, open) })
	t.Run("kernels", func(t *testing.T) { testKernels(t, open) })
}
