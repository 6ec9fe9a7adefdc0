//go:build cuda

package main

import (
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cuda"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
)

const build = "cuda"

func streamScratchBytes() int64 { return cuda.StreamScratchBytes() }

func openCUDA(job.Spec) (device.Device, error) {
	return cuda.Open(cuda.Config{})
}

// gpus lists the driver's GPUs for a devices request.
func gpus() ([]jobserver.GPU, error) {
	found, err := cuda.Devices()
	if err != nil {
		return nil, err
	}
	out := make([]jobserver.GPU, len(found))
	for i, g := range found {
		out[i] = jobserver.GPU(g)
	}
	return out, nil
}

// listGPUs is jobserver.Config.Devices in this build.
var listGPUs = gpus
