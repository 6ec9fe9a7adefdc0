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

// contextBytes opens GPU 0 as a job's worker does and reports what its
// context and modules took (jobserver.ContextBytes: the driver's used
// memory right after opening, which every budget request bills).
func contextBytes() (int64, error) {
	dev, err := cuda.Open(cuda.Config{})
	if err != nil {
		return 0, err
	}
	defer dev.Close()
	return jobserver.ContextBytes(dev)
}

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
