package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/coordinator"
)

// placementFlags place an activity's workers on devices: which GPUs
// (--devices), how many workers share one (--per-device) and how many run
// at once (--parallel).
type placementFlags struct {
	devices   string
	perDevice int
	parallel  int
}

// register adds the three flags; what names the workers ("shards").
func (p *placementFlags) register(fs *pflag.FlagSet, what string) {
	p.registerDevices(fs, "to spread the "+what+" over")
	fs.IntVar(&p.perDevice, "per-device", 0, "the "+what+" sharing one device at once (default: all of them spread evenly over the devices)")
	fs.IntVar(&p.parallel, "parallel", 0, "the "+what+" running at once (default: one per device slot); the others wait for a slot")
}

// registerDevices adds --devices alone, for an activity that places its
// workers by a rule of its own; how says what the GPUs are for.
func (p *placementFlags) registerDevices(fs *pflag.FlagSet, how string) {
	fs.StringVar(&p.devices, "devices", "auto", "GPUs "+how+": a list such as 0,1,2,3 (implies --device cuda), or auto: every GPU a CUDA tolaria-worker finds (with --device auto or cuda); each worker sees only its GPU (CUDA_VISIBLE_DEVICES)")
}

// check refuses a --per-device or --parallel given below 1 (register's
// flags).
func (p *placementFlags) check(fs *pflag.FlagSet) error {
	for i, n := range []int{p.perDevice, p.parallel} {
		if flag := []string{"per-device", "parallel"}[i]; fs.Changed(flag) && n < 1 {
			return usagef("--%s must be at least 1, got %d", flag, n)
		}
	}
	return nil
}

// resolve turns --device and the placement flags into a device (cpu or
// cuda) and the GPUs to place workers on. --devices auto on cuda (or on
// auto) asks a worker for the GPUs (the coordinator never opens CUDA) and
// takes every usable one; auto falls back to the CPU when there is none.
func (p *placementFlags) resolve(ctx context.Context, device string, w workerFlags, log *slog.Logger) (string, []int, error) {
	if p.devices != "auto" {
		if device == "cpu" {
			return "", nil, usagef("--devices names GPUs; it cannot go with --device cpu")
		}
		gpus, err := parseGPUs(p.devices)
		if err != nil {
			return "", nil, err
		}
		return "cuda", gpus, checkGPUs(ctx, gpus, w)
	}
	if device == "cpu" {
		return "cpu", nil, nil
	}
	found, err := coordinator.GPUs(ctx, coordinator.GPUsRequest{Worker: w.path, WorkerStart: w.start, HeartbeatTimeout: w.heartbeat})
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
		log.Info("devices auto", "gpus", len(gpus))
		return "cuda", gpus, nil
	case device == "auto":
		reason := "no usable GPU"
		if err != nil {
			reason = err.Error()
		}
		log.Info("device auto: using cpu", "reason", reason)
		return "cpu", nil, nil
	case err != nil:
		return "", nil, err
	}
	return "", nil, fmt.Errorf("--device cuda: the worker %s found no usable GPU (CUDA_VISIBLE_DEVICES may hide them); use --device cpu", orNext(w.path))
}

// checkGPUs refuses, before anything starts, GPUs that a worker does not
// find usable: a machine (or a tolaria-worker) without them fails here,
// not in every worker.
func checkGPUs(ctx context.Context, gpus []int, w workerFlags) error {
	found, err := coordinator.GPUs(ctx, coordinator.GPUsRequest{Worker: w.path, WorkerStart: w.start, HeartbeatTimeout: w.heartbeat})
	if err != nil {
		return fmt.Errorf("--devices names GPUs, but %w", err)
	}
	for _, g := range gpus {
		if g >= len(found) {
			return usagef("--devices: GPU %d is not among the %d GPUs the worker %s finds (see tolaria devices; CUDA_VISIBLE_DEVICES renumbers them)", g, len(found), orNext(w.path))
		}
		if gpu := found[g]; !gpu.Usable {
			return fmt.Errorf("--devices: GPU %d (%s) is not usable: %s", g, gpu.Name, gpu.Reason)
		}
	}
	return nil
}

// orNext names the worker binary: its path, or where tolaria looks.
func orNext(path string) string {
	if path == "" {
		return "next to tolaria"
	}
	return path
}

// parseGPUs reads a list of GPU indices such as "0,1,3", each once.
func parseGPUs(list string) ([]int, error) {
	var gpus []int
	for _, d := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(d))
		if err != nil || n < 0 {
			return nil, usagef("--devices: %q is not a GPU index; give indices such as 0,1, or auto", d)
		}
		for _, g := range gpus {
			if g == n {
				return nil, usagef("--devices: GPU %d is named twice", n)
			}
		}
		gpus = append(gpus, n)
	}
	return gpus, nil
}
