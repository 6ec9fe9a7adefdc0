package cuda

import (
	"fmt"
	"strconv"
)

// Config selects and limits the GPU a Device uses.
type Config struct {
	// Ordinal is the CUDA device number as the driver counts devices, that
	// is after CUDA_VISIBLE_DEVICES has been applied.
	Ordinal int
	// MemoryLimit caps the bytes of device memory the device's pool may hand
	// out; 0 leaves the GPU's total memory as the only limit. An allocation
	// beyond it fails with device.ErrOutOfMemory.
	MemoryLimit int64
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Ordinal < 0 {
		return fmt.Errorf("cuda: Config.Ordinal is %d; use a device number of 0 or more", c.Ordinal)
	}
	if c.MemoryLimit < 0 {
		return fmt.Errorf("cuda: Config.MemoryLimit is %d; use a byte count, or 0 for no limit", c.MemoryLimit)
	}
	return nil
}

// name is the device name reported by Device.Name, e.g. "cuda:0".
func (c Config) name() string { return "cuda:" + strconv.Itoa(c.Ordinal) }
