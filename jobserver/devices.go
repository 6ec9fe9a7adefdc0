package jobserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/worker"
)

// TypeDevices asks a worker which GPUs its driver reports; the answer is a
// DevicesResult. The worker opens no device for it, so the coordinator
// learns what a machine has without initialising CUDA itself.
const TypeDevices = "devices"

// GPU describes one GPU as a CUDA worker's driver counts it (after the
// worker's CUDA_VISIBLE_DEVICES); its fields are device/cuda's GPU.
type GPU struct {
	Ordinal           int    `json:"ordinal"`
	Name              string `json:"name"`
	PCIBusID          string `json:"pci_bus_id"`
	ComputeCapability string `json:"compute_capability"`
	TotalBytes        int64  `json:"total_bytes"`
	FreeBytes         int64  `json:"free_bytes"`
	Usable            bool   `json:"usable"`
	Reason            string `json:"reason,omitempty"`
}

// DevicesResult is a worker's answer to TypeDevices.
type DevicesResult struct {
	GPUs []GPU `json:"gpus"`
}

// serveDevices answers TypeDevices: hello, then the list, or a no_device
// error from a worker built without CUDA or whose driver fails.
func serveDevices(conn *worker.Conn, cfg Config) error {
	if cfg.Devices == nil {
		return conn.Fail(&worker.Error{Kind: worker.KindNoDevice,
			Message: fmt.Sprintf("%v: this tolaria-worker was built without CUDA, so it sees no GPU; build it with `make worker-cuda` (go build -tags cuda)", device.ErrNoDevice)})
	}
	gpus, err := cfg.Devices()
	if err != nil {
		return conn.Fail(&worker.Error{Kind: worker.KindNoDevice, Message: fmt.Sprintf("%v: %v", device.ErrNoDevice, err)})
	}
	hello := worker.Hello{Device: "cuda", Description: fmt.Sprintf("%d GPUs", len(gpus)), Build: cfg.Build, PID: os.Getpid()}
	if err := conn.Hello(hello); err != nil {
		return err
	}
	if gpus == nil {
		gpus = []GPU{}
	}
	return conn.Result(DevicesResult{GPUs: gpus})
}

// Devices asks the worker behind t for its GPUs (a TypeDevices request).
func Devices(ctx context.Context, t worker.Transport) (worker.Hello, []GPU, error) {
	h, res, err := t.Call(ctx, worker.Request{Type: TypeDevices}, worker.Sink{})
	if err != nil {
		return h, nil, err
	}
	var dr DevicesResult
	if err := json.Unmarshal(res, &dr); err != nil {
		return h, nil, fmt.Errorf("worker: reading the device list: %w", err)
	}
	return h, dr.GPUs, nil
}
