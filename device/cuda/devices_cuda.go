//go:build cuda

package cuda

import (
	"fmt"
	"runtime"

	"gorgonia.org/cu"
)

// GPU describes one GPU as the driver counts it, after
// CUDA_VISIBLE_DEVICES: what `tolaria devices` lists and what placement
// chooses from.
type GPU struct {
	Ordinal           int    `json:"ordinal"` // the number Config.Ordinal takes
	Name              string `json:"name"`
	PCIBusID          string `json:"pci_bus_id"` // domain:bus:device, as nvidia-smi prints it
	ComputeCapability string `json:"compute_capability"`
	TotalBytes        int64  `json:"total_bytes"`
	// FreeBytes is what the driver reports free when asked, counting every
	// process on the GPU.
	FreeBytes int64 `json:"free_bytes"`
	// Usable says whether tolaria's kernels run on it (compute capability
	// 8.0 or newer); Reason says why not.
	Usable bool   `json:"usable"`
	Reason string `json:"reason,omitempty"`
}

// Devices lists the GPUs the driver reports, in ordinal order. Reading a
// device's free memory makes its primary context current for a moment (a
// context costs the GPU a few hundred MiB while it lives); the context is
// released before the next device. No device is an empty list, not an
// error.
func Devices() ([]GPU, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: counting the devices: %w", err)
	}
	out := make([]GPU, 0, n)
	for i := range n {
		in, err := describe(i)
		if err != nil {
			return nil, fmt.Errorf("cuda: device %d: %w", i, err)
		}
		out = append(out, in)
	}
	return out, nil
}

// describe reads one device's identity and memory.
func describe(ordinal int) (GPU, error) {
	in := GPU{Ordinal: ordinal}
	dev, err := cu.GetDevice(ordinal)
	if err != nil {
		return in, err
	}
	if in.Name, err = dev.Name(); err != nil {
		return in, err
	}
	attr := func(a cu.DeviceAttribute) int {
		if err != nil {
			return 0
		}
		var v int
		v, err = dev.Attribute(a)
		return v
	}
	major, minor := attr(cu.ComputeCapabilityMajor), attr(cu.ComputeCapabilityMinor)
	domain, bus, slot := attr(cu.PciDomainID), attr(cu.PciBusID), attr(cu.PciDeviceID)
	if err != nil {
		return in, err
	}
	in.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	in.PCIBusID = fmt.Sprintf("%08x:%02x:%02x.0", domain, bus, slot)
	in.Usable = major >= 8
	if !in.Usable {
		in.Reason = fmt.Sprintf("compute capability %d.%d; tolaria's kernels are compiled for 8.0 or newer", major, minor)
	}
	if in.TotalBytes, err = dev.TotalMem(); err != nil {
		return in, err
	}
	ctx, r := retainPrimaryContext(dev)
	if r != cuSuccess {
		return in, fmt.Errorf("retaining its primary context: %w", DriverError{Code: r})
	}
	defer releasePrimaryContext(dev)
	if r := setCurrentContext(ctx); r != cuSuccess {
		return in, fmt.Errorf("making its context current: %w", DriverError{Code: r})
	}
	free, _, err := cu.MemInfo()
	if err != nil {
		return in, fmt.Errorf("reading its free memory: %w", err)
	}
	in.FreeBytes = free
	return in, nil
}
