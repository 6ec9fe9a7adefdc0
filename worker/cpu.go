package worker

import (
	"fmt"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/job"
)

// OpenCPU opens the CPU device for a job; any other name is refused.
func OpenCPU(name string, spec job.Spec) (device.Device, error) {
	if name != "cpu" {
		return nil, fmt.Errorf("%w: %q is not served in process; only cpu is", device.ErrNoDevice, name)
	}
	return cpu.Open(cpu.Config{SlowCopy: time.Duration(spec.SlowStageCopyMS * float64(time.Millisecond))})
}
