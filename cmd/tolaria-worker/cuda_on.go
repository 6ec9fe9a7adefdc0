//go:build cuda

package main

import (
	"fmt"
	"os"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cuda"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
)

const build = "cuda"

func streamScratchBytes() int64 { return cuda.StreamScratchBytes() }

// contextBytes opens GPU 0 as a job's worker does and reports what its
// context and modules took, as every budget request bills it
// (jobserver.ContextBytes: NVML's figure for this process, else the
// driver's used memory under the per-GPU lock); the source goes to
// stderr.
func contextBytes() (int64, error) {
	dev, err := cuda.Open(cuda.Config{})
	if err != nil {
		return 0, err
	}
	defer dev.Close()
	n, source, err := jobserver.ContextBytes(dev)
	if err == nil {
		fmt.Fprintf(os.Stderr, "tolaria-worker info: context_bytes measured by %s\n", source)
	}
	return n, err
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
