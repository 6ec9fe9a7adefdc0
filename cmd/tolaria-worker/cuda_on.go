//go:build cuda

package main

import (
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cuda"
	"github.com/tolaria-ml/tolaria/job"
)

const build = "cuda"

func openCUDA(job.Spec) (device.Device, error) {
	return cuda.Open(cuda.Config{})
}
