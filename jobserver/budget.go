package jobserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// BudgetRequest is a worker's request for a device-memory budget, sent
// before it allocates anything: the job's bill, and the device's memory as
// the worker found it.
type BudgetRequest struct {
	Bill   trainer.Bill `json:"bill"`
	Device string       `json:"device"` // the device's name, e.g. "cpu", "cuda:0"
	// Total and Free are the device's memory in bytes: the driver's
	// figures on a GPU (cuMemGetInfo), the device's limit and what it has
	// not allocated on the CPU.
	Total int64 `json:"total"`
	Free  int64 `json:"free"`
}

// BudgetGrant is the coordinator's grant.
type BudgetGrant struct {
	Bytes         int64   `json:"bytes"`
	WaitedSeconds float64 `json:"waited_seconds"`
}

// BudgetReply answers a budget request, at once or later.
type BudgetReply struct{ r worker.Reply }

// Grant lets the worker allocate.
func (b BudgetReply) Grant(g BudgetGrant) error {
	body, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return b.r.Grant(body)
}

// Refuse fails the worker's job with the reason.
func (b BudgetReply) Refuse(reason string) error {
	return b.r.Refuse(&worker.Error{Kind: worker.KindBudget, Message: reason})
}

// deviceMemory is dev's total and free memory: the driver's figures where
// the backend has them, else the device's limit and what it has not
// allocated.
func deviceMemory(dev device.Device) (total, free int64, err error) {
	if dm, ok := dev.(device.DriverMemory); ok {
		free, total, err = dm.DriverMemory()
		return total, free, err
	}
	m := dev.MemoryStats()
	return m.DeviceLimit, m.DeviceLimit - m.DeviceInUse, nil
}

// contextMeter is a device that measures what its process holds of it
// besides its own allocations (device/cuda: NVML's per-process figure, or
// the driver's used memory read under a per-GPU lock; see
// cuda.Device.ContextMemory), and says how.
type contextMeter interface {
	ContextMemory() (bytes int64, source string, err error)
}

// contextBytes is what dev holds of this process before the job allocates
// anything on it: on a GPU, the CUDA context and the modules its Open made
// and loaded. A device that measures it itself (contextMeter) is asked,
// and log says which source answered; one with only the driver's figures
// bills its used memory (total less free), which counts what other
// processes hold on the GPU too; 0 on a device without driver figures
// (the CPU).
func contextBytes(dev device.Device, log *slog.Logger) (int64, error) {
	if cm, ok := dev.(contextMeter); ok {
		n, source, err := cm.ContextMemory()
		if err != nil {
			return 0, fmt.Errorf("measuring what the device's context holds, for the budget request: %w", err)
		}
		if log != nil {
			log.Info("measured the device's context for the budget", "device", dev.Name(), "context_bytes", n, "source", source)
		}
		return n, nil
	}
	dm, ok := dev.(device.DriverMemory)
	if !ok {
		return 0, nil
	}
	free, total, err := dm.DriverMemory()
	if err != nil {
		return 0, fmt.Errorf("reading the device's memory once its context was made, for the budget request: %w", err)
	}
	return max(0, total-free), nil
}

// ContextBytes is what a worker that opened dev, and allocated nothing on
// it yet, bills as its context, and where the figure came from (see
// contextBytes): tolaria-worker info prints it.
func ContextBytes(dev device.Device) (bytes int64, source string, err error) {
	if cm, ok := dev.(contextMeter); ok {
		return cm.ContextMemory()
	}
	n, err := contextBytes(dev, nil)
	return n, "driver (total-free)", err
}

// askBudget sends bill, the job's on dev with the process's context, and
// waits for the grant.
func askBudget(ctx context.Context, conn *worker.Conn, bill trainer.Bill, dev device.Device) error {
	total, free, err := deviceMemory(dev)
	if err != nil {
		return fmt.Errorf("reading the device's memory for the budget request: %w", err)
	}
	body, err := json.Marshal(BudgetRequest{Bill: bill, Device: dev.Name(), Total: total, Free: free})
	if err != nil {
		return err
	}
	if _, err = conn.AskBudget(ctx, body); err != nil && ctx.Err() != nil {
		return &worker.Error{Kind: worker.KindBudget, Message: "stopped before the budget was granted; nothing was allocated or trained"}
	}
	return err
}

// BudgetParked is what a parked worker released.
type BudgetParked struct {
	ReleasedBytes int64 `json:"released_bytes"`
}

// Park asks the worker, which holds its budget, to park.
func (b BudgetReply) Park() error { return b.r.Park() }

// Unpark lets a parked worker set up again (its budget was granted again).
func (b BudgetReply) Unpark() error { return b.r.Unpark() }

// connParker parks the run when the coordinator asks (trainer.Parker over
// the protocol).
type connParker struct{ conn *worker.Conn }

func (p connParker) ParkRequested() bool { return p.conn.ParkRequested() }

func (p connParker) Parked(ctx context.Context, released int64) error {
	body, err := json.Marshal(BudgetParked{ReleasedBytes: released})
	if err != nil {
		return err
	}
	return p.conn.Parked(ctx, body)
}

func (p connParker) Unparked() {}
