package coordinator

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// The device choice every activity makes before it places workers: which
// device (auto, cpu or cuda) and which GPUs. The coordinator never opens
// CUDA: a worker is asked.

// DevicesRequest asks where an activity's workers run.
type DevicesRequest struct {
	Device  string // auto, cpu or cuda (the device key)
	Devices string // the devices key: auto, or a list of GPU indices such as 0,2
	// Workers says which tolaria-worker to ask about the GPUs and how long
	// to wait for it.
	Workers GPUsRequest
	Logger  *slog.Logger // says what auto chose
}

// ChooseDevices turns the device and devices keys into a device (cpu or
// cuda) and the GPUs to place workers on. A list of GPUs means cuda, and
// is checked by a worker before anything starts; devices auto on cuda (or
// on auto) takes every usable GPU a worker finds, and auto falls back to
// the CPU when there is none.
func ChooseDevices(ctx context.Context, req DevicesRequest) (string, []int, error) {
	if req.Devices != "auto" {
		if req.Device == "cpu" {
			return "", nil, configErr(field.Errorf("devices", "names GPUs; it cannot go with %s cpu", field.Name("device")))
		}
		gpus, err := ParseGPUs(req.Devices)
		if err != nil {
			return "", nil, err
		}
		return "cuda", gpus, checkGPUs(ctx, gpus, req.Workers)
	}
	if req.Device == "cpu" {
		return "cpu", nil, nil
	}
	found, err := GPUs(ctx, req.Workers)
	var gpus []int
	for _, g := range found {
		if g.Usable {
			gpus = append(gpus, g.Ordinal)
		}
	}
	switch {
	case ctx.Err() != nil:
		return "", nil, ctx.Err()
	case len(gpus) > 0:
		req.Logger.Info("devices auto", "gpus", len(gpus))
		return "cuda", gpus, nil
	case req.Device == "auto":
		reason := "no usable GPU"
		if err != nil {
			reason = err.Error()
		}
		req.Logger.Info("device auto: using cpu", "reason", reason)
		return "cpu", nil, nil
	case err != nil:
		return "", nil, err
	}
	return "", nil, field.Errorf("device", "is cuda, but the worker %s found no usable GPU (CUDA_VISIBLE_DEVICES may hide them); use %s cpu",
		workerName(req.Workers.Worker), field.Name("device"))
}

// ChooseDevice resolves device auto for work whose worker opens a device
// of its own: cuda when a CUDA build of the worker opens a GPU, cpu
// otherwise, as ChooseDevices chooses. Another device is kept.
func ChooseDevice(ctx context.Context, device string, workers GPUsRequest, log *slog.Logger) (string, error) {
	if device != "auto" {
		return device, nil
	}
	_, hello, err := train.CUDAWorker(ctx, workers.Worker, workers.WorkerStart, nil)
	switch {
	case err == nil:
		log.Info("device auto: using cuda", "gpu", hello.Description)
		return "cuda", nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	}
	log.Info("device auto: using cpu", "reason", err.Error())
	return "cpu", nil
}

// checkGPUs refuses, before anything starts, GPUs that a worker does not
// find usable: a machine (or a tolaria-worker) without them fails here,
// not in every worker.
func checkGPUs(ctx context.Context, gpus []int, workers GPUsRequest) error {
	found, err := GPUs(ctx, workers)
	if err != nil {
		return field.Errorf("devices", "names GPUs, but %w", err)
	}
	for _, g := range gpus {
		if g >= len(found) {
			return configErr(field.Errorf("devices", "GPU %d is not among the %d GPUs the worker %s finds (see tolaria devices; CUDA_VISIBLE_DEVICES renumbers them)",
				g, len(found), workerName(workers.Worker)))
		}
		if gpu := found[g]; !gpu.Usable {
			return field.Errorf("devices", "GPU %d (%s) is not usable: %s", g, gpu.Name, gpu.Reason)
		}
	}
	return nil
}

// workerName names the worker binary: its path, or where it is looked for.
func workerName(path string) string {
	if path == "" {
		return "next to tolaria"
	}
	return path
}

// ParseGPUs reads the devices key's list of GPU indices, such as "0,1,3",
// each once.
func ParseGPUs(list string) ([]int, error) {
	var gpus []int
	for _, d := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(d))
		if err != nil || n < 0 {
			return nil, configErr(field.Errorf("devices", "%q is not a GPU index; give indices such as 0,1, or auto", d))
		}
		for _, g := range gpus {
			if g == n {
				return nil, configErr(field.Errorf("devices", "GPU %d is named twice", n))
			}
		}
		gpus = append(gpus, n)
	}
	return gpus, nil
}
