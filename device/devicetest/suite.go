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

// Run runs the whole conformance suite.
func Run(t *testing.T, open Opener) {
	t.Run("memory", func(t *testing.T) { testMemory(t, open) })
	t.Run("ordering", func(t *testing.T) { testOrdering(t, open) })
	t.Run("events", func(t *testing.T) { testEvents(t, open) })
	t.Run("capture", func(t *testing.T) { testCapture(t, open) })
	t.Run("violations", func(t *testing.T) { testViolations(t, open) })
	t.Run("isolation", func(t *testing.T) { testIsolation(t, open) })
	t.Run("update", func(t *testing.T) { testUpdate(t, open) })
	t.Run("misuse", func(t *testing.T) { testMisuse(t, open) })
	t.Run("kernels", func(t *testing.T) { testKernels(t, open) })
}
