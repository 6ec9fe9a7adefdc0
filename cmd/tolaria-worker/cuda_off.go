//go:build !cuda

package main

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/job"
)

const build = "cpu"

func openCUDA(job.Spec) (device.Device, error) {
	return nil, fmt.Errorf("%w: this tolaria-worker was built without CUDA; build it with `make worker-cuda` (go build -tags cuda)", device.ErrNoDevice)
}
