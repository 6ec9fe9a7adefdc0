//go:build cuda

package main

import (
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cuda"
	"github.com/tolaria-ml/tolaria/job"
)

const build = "cuda"

func streamScratchBytes() int64 { return cuda.StreamScratchBytes() }

func openCUDA(job.Spec) (device.Device, error) {
	return cuda.Open(cuda.Config{})
}
