package main

import (
	"context"
	"log/slog"

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
// cuda) and the GPUs to place workers on (coordinator.ChooseDevices).
func (p *placementFlags) resolve(ctx context.Context, device string, w workerFlags, log *slog.Logger) (string, []int, error) {
	return coordinator.ChooseDevices(ctx, coordinator.DevicesRequest{Device: device, Devices: p.devices, Workers: w.gpus(), Logger: log})
}
