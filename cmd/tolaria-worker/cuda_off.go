//go:build !cuda

package main

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
)

const build = "cpu"

// streamScratchBytes: the CPU device's streams hold no memory of their own.
func streamScratchBytes() int64 { return 0 }

// contextBytes: the CPU device has no context; a budget bills none.
func contextBytes() (int64, error) { return 0, nil }

func openCUDA(job.Spec) (device.Device, error) {
	return nil, fmt.Errorf("%w: this tolaria-worker was built without CUDA; build it with `make worker-cuda` (go build -tags cuda)", device.ErrNoDevice)
}

// listGPUs is jobserver.Config.Devices in this build: none, so a devices
// request is answered with the reason.
var listGPUs func() ([]jobserver.GPU, error)
